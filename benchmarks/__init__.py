"""Benchmarks: speed, memory, cost and correctness of the backends, each printing JSON lines.

Run from the repository root as modules: ``python -m benchmarks.NAME --json``.
"""
