"""Example computations used by the quick start, the tests and the benchmarks."""
