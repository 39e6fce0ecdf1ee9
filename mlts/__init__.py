"""MLTS: the benchmark (``nnts bench``: latency and accuracy on real models against TFLite), the
seeded models, and the crash and stress tests (``nnts stress``)."""
