#!/usr/bin/env python3
"""Generate the project's own NNAPI test-vector corpus (``cts/corpus/*.json``).

Run ``python cts/corpus/generate.py`` from anywhere; it is deterministic (fixed seeds). The
families of operations are the modules of ``families/``; this script runs them in a fixed order
(they draw from one random generator) and writes one JSON file per family.

Expected values come from independent math written here from the NeuralNetworks.h
documentation (numpy / scipy, naive loops, hand-derived values) -- never from ``nnapi_ref``.
Quantized results are computed in float64 and quantized with round-half-away-from-zero and
clamping. This script does not import anything from the project.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMAT = "nnapi-test-vector/1"

if __package__:
    from .families import control_flow, convolution, detection, elementwise, recurrent, shapes
    from .families.common import TESTS
else:  # python cts/corpus/generate.py
    sys.path.insert(0, str(HERE))
    from families import control_flow, convolution, detection, elementwise, recurrent, shapes
    from families.common import TESTS

# The order the models were first generated in: the random draws depend on it.
GENERATORS = [elementwise.gen_binary, elementwise.gen_unary, elementwise.gen_activations, elementwise.gen_comparisons,
              shapes.gen_shapes, shapes.gen_space, shapes.gen_reductions, shapes.gen_conversions, shapes.gen_lookups,
              convolution.gen_conv, convolution.gen_pooling, convolution.gen_normalization, convolution.gen_resize,
              control_flow.gen_control_flow, control_flow.gen_random, recurrent.gen_rnn, recurrent.gen_lstm,
              detection.gen_detection, detection.gen_lsh, recurrent.gen_quantized_lstm]


def main(out: Path = HERE) -> None:
    """Every family's models, one JSON file per family in ``out``."""
    for g in GENERATORS:
        g()
    for fam, tests in TESTS.items():
        doc = {"format": FORMAT, "source": f"nnts/cts/corpus/generate.py ({fam})", "license": "Apache-2.0",
               "tests": tests}
        with open(Path(out) / f"{fam}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
    print(f"{sum(len(t) for t in TESTS.values())} models in {len(TESTS)} files")


if __name__ == "__main__":
    main()
