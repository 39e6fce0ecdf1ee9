"""libFuzzer-style entry point of the ``model`` harness (fuzz/harnesses.py) for atheris, ClusterFuzzLite
and OSS-Fuzz: ``python fuzz/model_fuzzer.py [CORPUS_DIR...] [-libfuzzer_flags]``. The driver under
test is NNTS_DRIVER (default: reference); the seeds are the test vectors of cts/corpus and
../shared/vectors. ``nnts fuzz --harness model`` runs the same harness with seeds and a summary."""
import os
import sys

import atheris

from nnts.fuzz import engine  # the standard library only: nnapi_ref is imported by the harness's setup

with atheris.instrument_imports(include=["nnapi_ref"], exclude=engine.not_instrumented("model")):
    TestOneInput = engine.load("model", os.environ.get("NNTS_DRIVER", "reference"), None)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
