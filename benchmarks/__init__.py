"""``flowrl.benchmarks`` (this folder, ``benchmarks/``: ``setup.py``'s ``SOURCE_FOLDERS``): GenEval, GenEval 2,
DPG-Bench, UniGenBench, the CPU toy benchmarks and the perf scripts."""
