"""Training from verifiable rewards.

Built so far: the reward functions of InfiGUI-G1 (AEPO) and GUI-R1 (``train.rewards``) and the
advantage estimators and policy loss (``train.algos``). The learner, data pipeline, checkpoints
and ``agent train`` are not built yet.
"""
