"""Fuzzing NNAPI drivers and the suite's own inputs: the fuzz targets (:mod:`nnts.fuzz.targets`),
the engine behind ``nnts fuzz`` (:mod:`nnts.fuzz.engine`) and libFuzzer entry points for atheris and
ClusterFuzzLite (``*_fuzzer.py``). Random models come from :mod:`nnts.generators`."""
