"""libFuzzer-style entry point of the ``model`` harness (fuzz/harnesses.py) for atheris, ClusterFuzzLite
and OSS-Fuzz: ``python fuzz/model_fuzzer.py [CORPUS_DIR...] [-libfuzzer_flags]``. The driver under
test is NNTS_DRIVER (default: reference); the seeds are the test vectors of cts/corpus and
../shared/vectors. ``nnts fuzz --harness model`` runs the same harness with seeds and a summary."""
import sys

import atheris

from nnts.fuzz import engine  # the standard library only: nnapi_ref is imported by the harness's setup

with atheris.instrument_imports(include=["nnapi_ref"], exclude=engine.not_instrumented("model")):
    settings = engine.settings_from_environment()  # this entry point's NNTS_DRIVER, NNTS_CALL_TIMEOUT, ...
    TestOneInput = engine.load("model", settings.driver, None, settings)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
