"""One process of the two-process DDP test (``tests/train/test_ddp.py``), run by ``accelerate launch``.

Usage: ``ddp_worker.py MODEL_DIR OUT_FILE [--single] [--unshared]``. Every process builds the same fixed batch of scored groups
(fixed response tokens: no sampling, so both runs see identical data), takes its share of the groups (rank r gets
groups r, r + world, ...), runs one ``Learner.step`` and rank 0 writes the trained LoRA tensors to OUT_FILE.
With ``--single`` one process trains on the whole batch: the reference the DDP run must match. ``--unshared``
runs every sample's prompt + answer on its own (``shared_prefix=False``) instead of the shared-prefix forward.
The answers of a group have different lengths (3 to 5 tokens), so the shared path pads them.
"""

from __future__ import annotations

from train.config import RLConfig, TrainModelConfig
import sys

import numpy as np
import torch


def batch() -> list[list]:
    from train.samples import TrainSample

    groups = []
    for g in range(4):
        image = np.random.default_rng(g).integers(0, 256, (56, 56, 3), dtype=np.uint8)
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Task {g}."}]}]
        group = []
        for k in range(3):
            ids = tuple(int(t) for t in np.random.default_rng(100 * g + k).integers(40, 120, 3 + k))
            group.append(TrainSample(messages, image, (56, 56), (56, 56), "x", ids, None, float((g + k) % 3),
                                     group_id=g))
        groups.append(group)
    return groups


def main() -> None:
    model_dir, out = sys.argv[1], sys.argv[2]
    single = "--single" in sys.argv
    shared = "--unshared" not in sys.argv
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from policy.backends.hf import TransformersBackend
    from policy.presets import Decoding, preset_for
    from train.learner import LORA_TARGETS, Learner

    preset = preset_for("tiny-qwen", fmt="qwen2.5-vl", min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28,
                        decoding=Decoding(temperature=0.0, max_new_tokens=8))
    backend = TransformersBackend(model_dir, preset=preset)
    accelerator = None
    if not single:
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
    # kl_coef on: the reference pass (adapter off) must work under DDP too. LoRA B starts at zero, so the first
    # step has zero gradient for A; two steps make both move.
    learner = Learner(backend, RLConfig(lr=1e-2, shared_prefix=shared), TrainModelConfig(lora_targets=(*LORA_TARGETS, "lm_head")), algo="grpo", accelerator=accelerator)
    groups = batch()
    mine = groups if single else groups[learner.rank::learner.world_size]
    for _ in range(2):
        metrics = learner.step(mine)
    if learner.rank == 0:
        torch.save({"state": learner.trainable_state(), "world": learner.world_size, "metrics": metrics}, out)
    if accelerator is not None:  # leave together: a rank that exits while another still talks over gloo can abort
        import torch.distributed as dist

        accelerator.wait_for_everyone()
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
