"""The fuzz run: every input through its family's parser and the rewards that read its answers, tallied."""

from __future__ import annotations

import math
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fuzz.inputs import KNOWN_INPUTS, VALID, mutate
from devices.actions import Action
from policy.errors import FormatParseError
from policy.formats import get_format
from policy.formats.base import AnswerForm, Parsed
from policy.presets import ModelPreset, preset_for
from train.reward_registry import REWARDS, RewardSpec
from train.rewards import RewardResult

FRAME = (1280, 720)
HANG_S = 1.0
"""A call slower than this is a hang."""

# -- what each input goes through ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Target:
    """One call an input goes through: ``run(text, rng)`` returns what it made."""

    name: str
    family: str
    """The row its time counts in: the parser's family, or "rewards"."""
    run: Callable[[str, random.Random], Any]
    parser: bool
    """A parser (FormatParseError is its expected failure) rather than a reward (never fails)."""


def preset_of(group: str) -> ModelPreset:
    family, _, variant = group.partition("/")
    version = {"ui-tars-1.5": "1.5", "ui-tars-v1": "1"}.get(family, "")
    fmt = "ui-tars" if family.startswith("ui-tars") else family
    overrides: dict[str, Any] = {"variant": variant} if variant else {}
    if version:
        overrides["version"] = version
    if family == "ui-tars-v1":
        return preset_for("fuzz", "ui-tars-v1", **overrides)
    return preset_for("fuzz", fmt, **overrides)


def _parser(group: str) -> Target:
    preset = preset_of(group)
    space, fmt = preset.space(FRAME), get_format(preset.family)
    return Target(f"parse {group}", preset.family, lambda text, _: fmt.parse(text, space, preset), True)


_BOXES = [(100.0, 100.0, 700.0, 400.0), None, (600.0, 300.0, 680.0, 420.0)]
_ACTION_TRUTH = [("click", [640, 360], None), ("click", [600, 300, 700, 400], None), ("type", None, "shanghai"),
                 ("scroll", None, "down"), ("impossible", None, None), ("close/delete", None, None)]


def _reward(spec: RewardSpec) -> Callable[[str, random.Random], RewardResult]:
    """``spec`` scored against a random ground truth of the kind it reads (a box, or an action with its place)."""
    def score(text: str, rng: random.Random) -> RewardResult:
        if spec.reads is AnswerForm.ACTION_LIST:
            action, place, typed = rng.choice(_ACTION_TRUTH)
            truth = {"action": action, "box": place if place and len(place) == 4 else None, "point": place,
                     "text": typed}
            return spec.score(truth, text, think=True)
        threshold = rng.choice([0.0, 0.1, 1.0]) if spec.needs_threshold else None
        return spec.score({"box": rng.choice(_BOXES), "coord_size": (1288, 728)}, text,
                          think=rng.random() < 0.8, threshold=threshold)
    return score


def targets(group: str) -> list[Target]:
    """The parser of ``group``, its family's reward-side strict parse, and every registered reward that reads the
    answers its preset writes (``train.reward_registry``)."""
    preset = preset_of(group)
    space, fmt = preset.space(FRAME), get_format(preset.family)
    out = [_parser(group),
           Target(f"strict_parse {group}", preset.family, lambda text, _: fmt.strict_parse(text, space, preset), True)]
    form = fmt.answer_form(preset)
    return out + [Target(spec.name, "rewards", _reward(spec), False) for spec in REWARDS.values()
                  if spec.reads is form]


def problem(target: Target, result: Any) -> str:
    """What is wrong with a call's result ("" when nothing): an action off the screen, no action, a
    reward that is not a finite float."""
    if isinstance(result, Parsed):
        if not result.actions:
            return "no action"
        for action in result.actions:
            if not isinstance(action, Action):
                return f"not an Action: {type(action).__name__}"
            for p in (action.point, action.end):
                if p is not None and not (0.0 <= p.x <= 1.0 and 0.0 <= p.y <= 1.0):
                    return "out-of-screen"
        return ""
    if isinstance(result, RewardResult):
        values = [result.total, *result.parts.values()]
        ok = all(isinstance(v, float) and math.isfinite(v) for v in values)
        return "" if ok else "reward not a finite float"
    if target.parser:  # strict_parse: a list of points
        return "" if isinstance(result, list) else f"unexpected result {type(result).__name__}"
    return f"unexpected result {type(result).__name__}"


# -- the fuzz run ---------------------------------------------------------------------------------------

class _Hang(Exception):
    """Raised by the alarm when one call runs far past the hang threshold (the bench must finish)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


@dataclass
class Tally:
    inputs: int = 0
    calls: int = 0
    parse_errors: int = 0
    crashes: dict[str, dict[str, Any]] = field(default_factory=dict)
    hangs: dict[str, dict[str, Any]] = field(default_factory=dict)
    off_screen: dict[str, dict[str, Any]] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)

    @staticmethod
    def _note(where: dict[str, dict[str, Any]], key: str, text: str) -> None:
        entry = where.setdefault(key, {"count": 0, "shortest": None})
        entry["count"] += 1
        if entry["shortest"] is None or len(text) < len(entry["shortest"]):
            entry["shortest"] = text

    def run(self, group: str, text: str, rng: random.Random, calls: list[Target]) -> None:
        self.inputs += 1
        spent: dict[str, float] = {}
        for target in calls:
            signal.setitimer(signal.ITIMER_REAL, 30 * HANG_S)
            start = time.perf_counter()
            try:
                result, failure = target.run(text, rng), ""
            except FormatParseError:
                result, failure = None, "parse error" if target.parser else "FormatParseError"
            except _Hang:
                result, failure = None, "hang"
            except Exception as exc:  # noqa: BLE001 - counting what escapes is the point
                result, failure = None, type(exc).__name__
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            elapsed = time.perf_counter() - start
            self.calls += 1
            spent[target.family] = spent.get(target.family, 0.0) + elapsed
            if elapsed > HANG_S or failure == "hang":
                self._note(self.hangs, target.name, text)
            if failure == "parse error":
                self.parse_errors += 1
            elif failure and failure != "hang":
                self._note(self.crashes, f"{target.name}: {failure}", text)
            elif result is not None and (kind := problem(target, result)):
                where = self.off_screen if kind in ("out-of-screen", "no action") else self.crashes
                self._note(where, f"{target.name}: {kind}", text)
        for family, seconds in spent.items():
            self.times.setdefault(family, []).append(seconds)


def fuzz(inputs: int, seed: int) -> Tally:
    """``inputs`` mutants (the known inputs first), spread evenly over the groups."""
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    calls = {group: targets(group) for group in VALID}
    tally = Tally()
    for group, text in KNOWN_INPUTS:
        tally.run(group, text, rng, calls[group])
    groups = list(VALID)
    while tally.inputs < inputs:
        group = groups[tally.inputs % len(groups)]
        tally.run(group, mutate(rng.choice(VALID[group]), rng), rng, calls[group])
    return tally


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def summary(tally: Tally) -> dict[str, Any]:
    def brief(notes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {k: {"count": v["count"], "shortest_chars": len(v["shortest"]), "shortest": v["shortest"][:300]}
                for k, v in sorted(notes.items())}

    return {
        "inputs": tally.inputs, "calls": tally.calls, "parse_errors": tally.parse_errors,
        "crashes": sum(v["count"] for v in tally.crashes.values()), "crash_kinds": brief(tally.crashes),
        "hangs": sum(v["count"] for v in tally.hangs.values()), "hang_kinds": brief(tally.hangs),
        "out_of_screen": sum(v["count"] for v in tally.off_screen.values()),
        "out_of_screen_kinds": brief(tally.off_screen),
        "time_per_input_ms": {family: {"median": _ms(t, 0.5), "p99": _ms(t, 0.99), "max": round(1000 * max(t), 3),
                                       "inputs": len(t)} for family, t in sorted(tally.times.items())},
    }
