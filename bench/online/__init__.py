"""Benchmarks of online sessions (``agent train --online``): the whole loop's throughput with 1, 2 and 4 browser
actors and where its time goes (``bench.online.throughput``), and learning curves of online runs
(``bench.online.curve``). ``python -m bench.online --help``."""
