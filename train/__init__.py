"""Training from verifiable rewards: InfiGUI-G1's AEPO and GUI-R1's GRPO, and the supervised stages around them.

- ``rewards``: the verifiable rewards as pure functions; ``algos``: advantages, the PPO surrogate, the k3 KL.
- ``samples``: training samples and prompts, JSONL files, streaming groups.
- ``data``: prompt sources (grounding files, generated screens, recorded trajectories), the resumable sampler,
  the reward adapter; ``curriculum``: difficulty filtering, dynamic sampling, the adaptive curriculum.
- ``learner``: the policy-gradient update (LoRA or full, several processes); ``sft``: supervised updates,
  rejection sampling, greedy held-out accuracy.
- ``trainer``: the loop behind ``agent train``; ``config``: its settings; ``checkpoint``: save and resume;
  ``monitors``: collapse monitors and early stopping; ``metrics``: JSONL, TensorBoard, curves, progress.
"""
