"""Running a policy on a grounding dataset (the loaders are in envs.grounding, the official scoring in
envs.grounding_score)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from devices.base import Observation
from envs.errors import EnvError
from envs.grounding import GroundingSample, RejectedRecord, RejectKind, read_rgb
from envs.grounding_score import GroundingPrediction, GroundingReport, SampleResult, score, score_sample
from policy.base import Policy
from policy.errors import PolicyParseError
from policy.model import ModelPolicy

log = logging.getLogger(__name__)


def with_grounding_prompt(policy: Policy, *, variant_chosen: bool) -> Policy:
    """The policy to run on a grounding dataset: a model whose family has a grounding prompt
    (``ModelFormat.grounding_variant``: Qwen2.5-VL's and UI-TARS's ``grounding``, GUI-R1's ``screenspot``) is asked
    with it, so a benchmark scores the model as its authors evaluated it, not with its computer-use prompt. A
    variant the user chose (``variant_chosen``: ``model.variant`` is set) is kept, and so is every other policy."""
    if variant_chosen or not isinstance(policy, ModelPolicy):
        return policy
    grounding = policy.format.grounding_variant
    if grounding is None or grounding == policy.preset.variant:
        return policy
    return policy.with_preset(replace(policy.preset, variant=grounding))


async def evaluate_grounding(samples: Sequence[GroundingSample], policy: Policy, *, concurrency: int = 4,
                             strict: bool = False, rejected: Iterable[RejectedRecord] = (), n: int = 1,
                             on_result: Callable[[SampleResult], None] | None = None) -> GroundingReport:
    """Ask ``policy`` for each sample's target and score the answers.

    The instruction is the task, the history is empty and the observation is the screenshot in
    RGB. At most ``concurrency`` samples are in flight (and in memory) at once. An output that does
    not parse is a miss. A sample whose image cannot be decoded (a load reads only its header, so a
    file cut off after it shows here) is not scored: it joins the report's rejected records, named
    by its image file and why. Policy errors other than parse errors (backend down) stop the run:
    the first one is raised as it is (not in an ``ExceptionGroup``). ``on_result`` is called as
    each sample is scored (for progress bars).
    """
    if concurrency < 1:
        raise EnvError(f"concurrency must be at least 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)
    predictions: list[GroundingPrediction | None] = [None] * len(samples)
    unreadable: dict[int, RejectedRecord] = {}

    async def one(i: int, sample: GroundingSample) -> None:
        async with gate:
            try:
                frame = await asyncio.to_thread(read_rgb, sample.image_path)
            except EnvError as e:
                unreadable[i] = RejectedRecord(sample.image_path, -1, RejectKind.UNREADABLE_IMAGE,
                                               f"sample {sample.id}: {e}")
                log.warning("rejected grounding sample %s", unreadable[i])
                return
            observation = Observation(frame, meta={"sample_id": sample.id, "image_path": str(sample.image_path)})
            try:
                decision = await policy.decide(sample.instruction, (), observation, n=n)
                predictions[i] = GroundingPrediction.from_decision(decision)
            except PolicyParseError as e:
                predictions[i] = GroundingPrediction(parse_error=str(e))
        if on_result is not None:
            on_result(score_sample(sample, predictions[i], strict=strict))

    try:
        async with asyncio.TaskGroup() as group:
            for i, sample in enumerate(samples):
                group.create_task(one(i, sample))
    except ExceptionGroup as eg:  # the first failure cancelled the rest; callers catch it as from a plain await
        raise eg.exceptions[0] from None
    kept = [i for i in range(len(samples)) if i not in unreadable]
    return score([samples[i] for i in kept], [predictions[i] for i in kept], strict=strict,
                 rejected=[*rejected, *(unreadable[i] for i in sorted(unreadable))])
