"""Benchmarks: GenEval, UniGenBench, the CPU toy benchmark, perf scripts."""
