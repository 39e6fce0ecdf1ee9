"""Benchmarks of the NNAPI reference (mlts: machine-learning test suite)."""
