"""The models of ``../shared/models`` on nnapi_ref's reference driver against TensorFlow Lite:
``nnts bench --driver reference`` under its earlier name (the measurement is :mod:`mlts.bench`).

    python -m nnts.mlts.bench_models [--quick] [--models GLOB] [--models-dir DIR] [--json FILE]

``--quick``: 10 timed runs per model instead of 50. Not a test: the figures depend on the machine
and its load.
"""
from __future__ import annotations

import argparse
import sys

from nnts.mlts.bench import MODELS_DIR, model_inputs, tflite_interpreter_class  # noqa: F401  (mlts.diverge uses them)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 timed runs per model (else 50)")
    parser.add_argument("--models", default="*.tflite", help="glob of model file names (default *.tflite)")
    parser.add_argument("--models-dir", default=MODELS_DIR,
                        help="folder of .tflite models (default ../shared/models beside a clone, else the seeded set)")
    parser.add_argument("--json", help="also write the results as JSON to this file (schema in mlts/bench.py)")
    args = parser.parse_args(argv)
    from nnts.cli import main as nnts
    models = ["--models", f"{args.models_dir}/{args.models}"] if args.models_dir else []
    return nnts(["bench", "--driver", "reference", *models,
                 "--runs", "10" if args.quick else "50"] + (["--json", args.json] if args.json else []))


if __name__ == "__main__":
    sys.exit(main())
