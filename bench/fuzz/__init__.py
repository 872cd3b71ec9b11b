"""Fuzz the model-output parsers and the rewards: every input parses or is a parse error, fast; and the fleet's
wire messages: every message decodes or is a ``TransportError``, within a memory budget.

Valid outputs of each family (Qwen2.5-VL computer_use / mobile_use / grounding, InfiGUI-G1, GUI-R1,
UI-TARS-1.5 computer / mobile / grounding and UI-TARS v1) are mutated 1-4 times (characters inserted,
deleted or replaced; numbers made huge, written in other scripts' digits or swapped for other types;
values nested or emptied; items repeated; the text cut off) and each mutant goes through its family's
parser, and through the rewards that read that family's answers (AEPO, its paper variant and its
ablation, the distance reward, InfiGUI-G1's strict parser; GUI-R1's reward, both variants). Counted:

- crashes: any exception other than the family's FormatParseError (for a reward: any exception, or
  a total that is not a finite float), by target and type, each with its shortest input;
- hangs: a call over 1 s;
- out-of-screen: a parsed action with a point outside [0, 1] (or no action at all);
- the median / p99 / max time per input of each family (all its calls for that input).

Beside it, the wire target (``wire``): mutated fleet messages (``--wire``, 20,000 by default) through the decoder
and the learner's inbox, counting errors other than the documented ``TransportError``, messages delivered with a
non-finite number or a path for an image, and resident memory against one message's pixel budget.

Then the super-linear cases the fuzzer once found, timed against the code they replaced (copied here
as the naive path, each run in a child process killed at ``--limit`` seconds), and how the new code
grows when its input grows tenfold.

Run: .venv/bin/python -m bench.fuzz [--inputs 100000] [--wire 20000] [--seed 0] [--limit 60] [--out PATH]
Prints tables and writes JSON (default bench/results/fuzz.json; the copy in docs/results/ is what
docs/benchmarks.md shows). Modules: ``inputs`` (valid outputs, the known inputs, the mutator, also used
by tests/policy/formats/test_fuzz.py), ``run`` (the fuzz run and its tally), ``wire`` (the fleet messages, also
run by tests/agent/fleet/test_wire_fuzz.py), ``naive`` (old code against
new, and growth with a tenfold input), ``__main__``.
"""
