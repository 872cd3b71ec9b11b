"""Training from verifiable rewards: InfiGUI-G1's AEPO and GUI-R1's GRPO, and the supervised stages around them.

- ``rewards``: the verifiable rewards as pure functions (``collinear``: AEPO's collinear test, O(N^2));
  ``reward_registry``: the names a config gives them; ``algos``: advantages, the PPO surrogate, the k3 KL.
- ``samples``: training samples and prompts, JSONL files, streaming groups.
- ``data`` (a package): prompt sources (grounding files, generated screens, recorded trajectories), the resumable
  sampler, the reward adapter; ``curriculum``: difficulty filtering, dynamic sampling, the adaptive curriculum.
- ``learner``: the policy-gradient update (LoRA or full, several processes); ``sft``: supervised updates,
  rejection sampling, greedy held-out accuracy; ``trainable``: the interface both learners give the trainer.
- ``trainer``: the loop behind ``agent train``; ``build``: its parts from a config; ``config``: its settings;
  ``checkpoint``: save and resume; ``monitors``: collapse monitors and early stopping; ``metrics``: JSONL,
  TensorBoard, curves, progress.
- ``adapters``: published adapter versions; ``messages``, ``wire`` and ``transport``: the messages of an online
  session, their bytes on a bus, and the interface they travel through.
- ``errors``: every training error, under ``TrainError``.
"""
