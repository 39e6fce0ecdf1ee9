"""mlts.import_coverage on the project's seeded models, and on a model it must refuse."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nnts.mlts import import_coverage
from nnts.mlts.models import builder, seeded_models

pytestmark = pytest.mark.skipif(builder.available() is not None, reason="needs ai-edge-litert")


def refused_model(path):
    """A model of SEGMENT_SUM, which has no NNAPI mapping, followed by LOGISTIC, which has."""
    b = builder.GraphBuilder("refused")
    x = b.tensor("x", (4, 3))
    ids = b.tensor("ids", (4,), "int32", np.array([0, 0, 1, 1], np.int32))
    s, y = b.tensor("s", (2, 3)), b.tensor("y", (2, 3))
    b.op("SEGMENT_SUM", [x, ids], [s])
    b.op("LOGISTIC", [s], [y])
    path.write_bytes(b.finish([x], [y]))


def test_seeded_models_agree_and_a_refusal_names_its_operator(tmp_path, capsys):
    folder = tmp_path / "models"
    seeded_models(folder, ["mobilenet_v1_0.25_128_seeded", "lstm_asr_seeded"])
    refused_model(folder / "segment_sum.tflite")
    assert import_coverage.main([str(folder), "--samples", "1", "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    rows = {r["model"].split("/")[-1]: r for r in json.loads((tmp_path / "rows.json").read_text())}
    assert set(rows) == {"mobilenet_v1_0.25_128_seeded_float.tflite", "mobilenet_v1_0.25_128_seeded_int8.tflite",
                         "lstm_asr_seeded_float.tflite", "lstm_asr_seeded_hybrid.tflite", "segment_sum.tflite"}
    for name, row in rows.items():
        if name == "segment_sum.tflite":
            assert row["status"] == "refused" and row["refused"] == ["SEGMENT_SUM"]
            assert "operator 0 (SEGMENT_SUM): is not supported" in row["detail"]
        elif name == "lstm_asr_seeded_hybrid.tflite":
            # The importer dequantizes the int8 weights (NNAPI has no hybrid LSTM); TFLite's hybrid
            # kernel quantizes the activations on the fly: close, but beyond FLOAT_RTOL.
            assert row["status"] == "differs" and import_coverage.FLOAT_RTOL < row["relative_error"] < 0.1, row
        else:
            assert row["status"] == "agrees", row
            assert row["operators"] > 0 and row["tflite_kernels"] == "reference"
    int8 = rows["mobilenet_v1_0.25_128_seeded_int8.tflite"]
    assert int8["max_error_steps"] <= 1   # measured 0: a 31-operator network drifts less than the deep ones
    assert rows["mobilenet_v1_0.25_128_seeded_float.tflite"]["relative_error"] < 1e-4
    assert "5 models: 4 import (3 agrees, 1 differs, 1 refused)" in out
    assert "operators without a mapping: SEGMENT_SUM" in out
