"""The benchmark credits the driver only with what it ran: each model says how much ran on the
driver (operations, share of time); a model that ran mostly on the CPU fallback is marked, has no
latency ratio and is kept out of the driver's figures (the median of the driver page, the ratio
chart); accuracy names the devices that computed it; a --models that names no model is one line
and a non-zero exit."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nnapi_ref import using_drivers
from nnapi_ref.drivers.variants import SubsetDevice
from nnapi_ref.types import OperationCode
from nnts.mlts import bench
from nnts.mlts.models import builder, seeded_models
from nnts.reports import bench as bench_page, driver_page


def row(on_driver: int, total: int, time_on_driver: float | None, status: str = "passed") -> dict:
    return {"model": f"m{on_driver}", "status": status, "reason": None, "time_on_driver": time_on_driver,
            "operations": {"total": total, "on_driver": on_driver,
                           "by_device": {"nnapi-reference": total - on_driver, "acme": on_driver}, "unsupported": {}}}


@pytest.mark.parametrize("ops, total, time, fallback, status", [
    (65, 65, None, False, "passed"),     # one step on the driver
    (60, 65, 0.9, False, "passed"),      # a little fallback
    (40, 65, 0.3, True, "passed"),       # most operations on the driver, most of the time not
    (10, 65, 0.2, True, "passed"),       # mostly the fallback's
    (0, 65, None, True, "skipped"),      # the driver ran nothing: nothing of the model is its
])
def test_a_model_says_how_much_ran_on_the_driver(ops, total, time, fallback, status):
    r = row(ops, total, time)
    bench.credit(r)
    assert r["on_driver"]["operations"] == ops / total and r["fallback"] is fallback and r["status"] == status
    assert (r["on_driver"]["time"] == time) if time is not None else r["on_driver"]["time"] in (0.0, 1.0)
    if fallback:
        assert r["reason"].startswith(f"mostly on the CPU fallback ({ops} of {total} operations on the driver")


def test_fallback_models_are_out_of_the_driver_s_figures(tmp_path):
    rows = [dict(row(65, 65, None), ratio=2.0, fallback=False), dict(row(0, 65, None), ratio=40.0, fallback=True)]
    assert "m0" not in bench_page.ratio_svg(rows) and "m65" in bench_page.ratio_svg(rows)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"schema": bench.SCHEMA, "models": rows}))
    assert "median latency x2.00 TFLite's" in driver_page.other_result(str(path))["summary"]


def test_bench_with_nothing_to_run_is_one_line_and_fails(tmp_path):
    (tmp_path / "empty").mkdir()
    for models in ("/nonexistent", str(tmp_path / "empty")):
        done = subprocess.run([sys.executable, "-m", "nnts", "bench", "--models", models], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nnts bench:" in done.stderr, done.stderr
        assert done.stdout == ""


@pytest.mark.skipif(bench.tflite_interpreter_class()[0] is None or builder.available() is not None,
                    reason="needs ai-edge-litert (TFLite baseline and .tflite schema)")
def test_a_driver_that_runs_nothing_of_a_model_is_not_credited_with_it(tmp_path):
    model = seeded_models(tmp_path, ["mobilenet_v1_0.25_128_seeded"])[0]
    adds_only = SubsetDevice("adds-only", {OperationCode.ADD})
    with using_drivers([adds_only]):
        results = bench.run([(model, None)], "adds-only", bench.Settings(warmup=1, runs=3, max_time=5))
    r = results["models"][0]
    assert r["fallback"] and r["status"] == "skipped" and "ratio" not in r
    assert r["on_driver"] == {"operations": 0.0, "time": 0.0}
    assert r["accuracy"]["computed_by"] == {"nnapi-reference": r["operations"]["total"]}
    assert "mostly on the CPU fallback (0 of" in bench.summary_line(r)
