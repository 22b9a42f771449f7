"""Test-only tools (the fault-injecting proxy), shared by the tests and the benchmarks."""
