"""Offline action benchmarks as GUI-R1 evaluates them: AndroidControl-Low/High, GUI-Odyssey, OmniAct-Web/Desktop
and GUI-Act-Web (docs/environments.md, "Action benchmarks").

- ``benchmarks``: the six benchmarks, their action lists and the paper's published rows;
- ``records``: reading the released Parquet test files (and the same records as JSONL with an image folder);
- ``metrics``: Type, GR and SR as the released ``eval_omni.py`` computes them, as pure functions;
- ``mapping``: a policy's answer in a benchmark's terms (a unified action, or a GUI-R1 output read as released).

Running a policy over them is ``agent.action_eval`` (``agent eval --suite actions``). The package imports nothing
itself, so ``train.rewards`` can use ``metrics.token_f1`` without loading OpenCV.
"""
