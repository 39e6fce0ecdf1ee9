"""libFuzzer-style entry point of the ``request`` harness (fuzz/harnesses.py) for atheris, ClusterFuzzLite
and OSS-Fuzz: ``python fuzz/request_fuzzer.py [CORPUS_DIR...] [-libfuzzer_flags]``. The driver under
test is NNTS_DRIVER (default: reference); the seeds are the test vectors of cts/corpus and
../shared/vectors. ``nnts fuzz --harness request`` runs the same harness with seeds and a summary."""
import sys

import atheris

with atheris.instrument_imports(include=["nnapi_ref"]):  # nnapi_ref is imported by the harness's setup
    from nnts.fuzz.engine import load, settings_from_environment
    settings = settings_from_environment()  # this entry point's NNTS_DRIVER, NNTS_CALL_TIMEOUT, ...
    TestOneInput = load("request", settings.driver, None, settings)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
