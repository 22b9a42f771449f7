"""Slow tests: canaries trained, llama.cpp servers, CLI pipelines in subprocesses, the black-box
path end to end through ``bbmia serve`` (seconds to minutes a test)."""
