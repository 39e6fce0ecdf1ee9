"""Bad input at the model entry points (``nnts bench``, ``python -m nnts.mlts.diverge``,
``python -m nnts.mlts.import_coverage``, the .tflite importer): a model TFLite's interpreter
crashes on, or that declares an input no one should allocate, or none, is one row or one line;
the good models' rows are kept and written."""
import json
import math

import numpy as np
import pytest

from nnts import cli
from nnts.formats.tflite.importer import TFLiteImportError, load_tflite
from nnts.mlts import diverge, import_coverage
from nnts.mlts.tflite_baseline import tflite_interpreter_class

from .test_tflite_import import ADD, INT8, Scalar, build_tflite, tensor

INT16 = 7  # TensorType
needs_tflite = pytest.mark.skipif(tflite_interpreter_class()[0] is None, reason="ai-edge-litert is not installed")


def add_model(shape, ttype=0, scale=None, inputs=(0, 1), constant=False) -> bytes:
    quant = dict(scale=[scale], zero_point=[0]) if scale is not None else {}
    data = np.ones(shape, np.float32) if constant else None
    tensors = [tensor(shape, ttype, data=data, **quant), tensor(shape, ttype, data=data, **quant),
               tensor(shape, ttype, **quant)]
    return build_tflite(tensors, [(ADD, [0, 1], [2], {0: Scalar("b", 0)})], list(inputs), [2])


@pytest.fixture
def models(tmp_path):
    """A folder of one good model and three bad ones."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "good.tflite").write_bytes(add_model([1, 4]))
    (folder / "huge.tflite").write_bytes(add_model([1, 100000, 100000, 3]))
    (folder / "noinputs.tflite").write_bytes(add_model([1, 4], inputs=(), constant=True))
    (folder / "nan_scales.tflite").write_bytes(add_model([1, 4], INT8, scale=math.nan))
    return folder


def test_the_importer_refuses_huge_inputs_and_no_inputs_before_allocating(models):
    with pytest.raises(TFLiteImportError, match="over nnts.s memory budget"):
        load_tflite(models / "huge.tflite")
    with pytest.raises(TFLiteImportError, match="no inputs"):
        load_tflite(models / "noinputs.tflite")
    big = models.parent / "big.tflite"
    big.write_bytes(add_model([2 ** 31 - 1]))
    with pytest.raises(TFLiteImportError, match="over nnts.s memory budget"):
        load_tflite(big)


@needs_tflite
def test_bench_keeps_the_good_row_when_tflite_crashes_on_another(models, tmp_path, capsys):
    """TFLite's interpreter aborts allocating an INT16 ADD with NaN scales (XNNPACK refuses the INT8
    one cleanly): the baseline runs in a child, so the abort is that row's baseline_error."""
    (models / "nan_scales_int16.tflite").write_bytes(add_model([1, 4], INT16, scale=math.nan))
    out = tmp_path / "bench.json"
    code = cli.main(["bench", "--models", str(models), "--runs", "3", "--warmup", "0", "--max-time", "1",
                     "--json", str(out)])
    rows = {r["model"]: r for r in json.loads(out.read_text())["models"]}
    assert code == 0, capsys.readouterr()
    good = rows["good.tflite"]
    assert good["status"] == "passed" and good["driver"] and good["accuracy"]["snr_db"] is None  # identical
    assert good["baseline"]["latency_ms"]["runs"] == good["driver"]["latency_ms"]["runs"] == 3
    assert good["baseline"]["latency_ms"]["p50"] > 0 and good["baseline"]["throughput"]["per_s"] > 0
    assert "crashed" in rows["nan_scales_int16.tflite"]["baseline_error"]
    assert "SIGABRT" in rows["nan_scales_int16.tflite"]["baseline_error"]
    assert "nan" in rows["nan_scales.tflite"]["baseline_error"]  # refused, or crashed on another setup
    assert rows["huge.tflite"]["status"] == "skipped" and "memory budget" in rows["huge.tflite"]["reason"]
    assert rows["noinputs.tflite"]["status"] == "skipped"


def test_bench_exits_1_when_no_model_imports(models, tmp_path, capsys):
    (models / "good.tflite").unlink()
    out = tmp_path / "bench.json"
    code = cli.main(["bench", "--models", str(models), "--baseline", "none", "--json", str(out)])
    assert code == 1
    assert "none of the 3 model(s) could be imported" in capsys.readouterr().err
    assert len(json.loads(out.read_text())["models"]) == 3


@needs_tflite
def test_import_coverage_keeps_every_row(models, tmp_path, capsys):
    out = tmp_path / "coverage.json"
    assert import_coverage.main([str(models), "--json", str(out)]) == 0
    rows = {r["model"].rsplit("/", 1)[1]: r for r in json.loads(out.read_text())}
    assert rows["good.tflite"]["status"] == "agrees"
    assert rows["huge.tflite"]["status"] == rows["noinputs.tflite"]["status"] == "refused"


@pytest.mark.parametrize("problem", ["missing", "folder", "empty", "huge", "noinputs", "inputs"])
def test_diverge_bad_inputs_are_one_line(models, tmp_path, capsys, problem):
    empty = tmp_path / "empty.tflite"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not an npz at all" * 10)
    argv = {"missing": [str(tmp_path / "missing.tflite")], "folder": [str(tmp_path)], "empty": [str(empty)],
            "huge": [str(models / "huge.tflite")], "noinputs": [str(models / "noinputs.tflite")],
            "inputs": [str(models / "good.tflite"), "--inputs", str(garbage)]}[problem]
    assert diverge.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlts.diverge: ") and err.count("\n") == 1 and "Traceback" not in err, err


@needs_tflite
def test_diverge_does_not_run_tflite_in_process_on_a_model_it_crashes_on(models, capsys):
    assert diverge.main([str(models / "nan_scales.tflite")]) == 2
    assert "crashed" in capsys.readouterr().err
