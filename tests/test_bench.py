"""nnts bench and nnts gate on a small part of the seeded set (mlts.models): the JSON's figures,
partial support and refused models as rows, the gate against an injected accuracy regression and
an injected slowdown (test drivers below), and the HTML report in a real headless Chromium."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import using_drivers
from nnapi_ref.drivers.broken import BrokenDevice, _WrappedOperation
from nnapi_ref.drivers.variants import SubsetDevice
from nnapi_ref.types import OperationCode
from nnts.mlts import bench, bench_gate
from nnts.mlts.models import builder, seeded_models

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(bench.tflite_interpreter_class()[0] is None or builder.available() is not None,
                                reason="needs ai-edge-litert (TFLite baseline and .tflite schema)")
RUNS = ["--warmup", "1", "--runs", "6"]
SLEEP_S = 0.05


class ShiftedSoftmax(BrokenDevice):
    """SOFTMAX's probabilities shifted by one class: every top-1 wrong."""
    FAULT = "shifted_softmax"

    def operation_fault(self, code, impl):
        if code != OperationCode.SOFTMAX:
            return impl
        return _WrappedOperation(impl, lambda call, outs: [np.roll(outs[0], 1, axis=-1)] + list(outs[1:]))


class SlowSoftmax(BrokenDevice):
    """Right results, SLEEP_S late."""
    FAULT = "slow_softmax"

    def operation_fault(self, code, impl):
        if code != OperationCode.SOFTMAX:
            return impl
        return _WrappedOperation(impl, lambda call, outs: (time.sleep(SLEEP_S), outs)[1])


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("seeded")
    paths = seeded_models(folder, ["mobilenet_v1_0.25_128_seeded", "lstm_asr_seeded"])
    return [p for p in paths if p.name != "lstm_asr_seeded_float.tflite"]   # v1 float, v1 int8, ASR hybrid


def nnts(*args) -> subprocess.CompletedProcess:
    """The nnts command in a process of its own (it sets the runtime's drivers for good)."""
    return subprocess.run([sys.executable, "-m", "nnts", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def bench_json(tmp: Path, name: str, models, *extra) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp / f"{name}.json"
    proc = nnts("bench", "--models", *models, *RUNS, "--json", out, *extra)
    assert out.exists(), proc.stderr
    return json.loads(out.read_text()), proc


@pytest.fixture(scope="module")
def clean(models, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    (tmp / "stress.json").write_text(json.dumps([
        {"name": "parallel_inference", "verdict": "SUCCESS", "message": "ok", "seconds": 1.5, "metrics": {}},
        {"name": "soak", "verdict": "FAILURE", "message": "VmRSS grew 20 MiB", "seconds": 3.0, "metrics": {}}]))
    results, proc = bench_json(tmp, "clean", models, "--driver", "reference", "--html", tmp / "bench.html",
                               "--include", tmp / "stress.json")
    return tmp, results, proc


def test_bench_figures(clean, models):
    tmp, results, proc = clean
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results["schema"] == "nnts-bench/2" and results["devices"] == ["nnapi-reference"]
    env = results["environment"]
    assert env["cores"] >= 1 and len(env["load_start"]) == 3 and len(env["load_end"]) == 3
    assert env["tflite"].startswith("ai-edge-litert") and env["numpy"] == np.__version__
    rows = {r["model"]: r for r in results["models"]}
    assert set(rows) == {p.name for p in models}
    for name, row in rows.items():
        assert row["status"] == "passed" and row["origin"] == "seeded" and row["inputs"] == "synthetic", row
        assert row["operations"]["on_driver"] == row["operations"]["total"] > 0
        for side in ("driver", "baseline"):
            lat = row[side]["latency_ms"]
            assert lat["runs"] == 6 and sum(row[side]["histogram"]["counts"]) == 6
            assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
            assert lat["min"] <= lat["mean"] <= lat["max"] and lat["std"] >= 0
            assert row[side]["first_ms"] > 0 and row[side]["throughput"]["per_s"] > 0
        assert row["driver"]["compile_ms"]["cold"] > 0 and row["driver"]["compile_ms"]["cached"] > 0
        assert row["driver"]["burst_ms"]["runs"] >= 5
        assert row["ratio"] == pytest.approx(row["driver"]["latency_ms"]["p50"] / row["baseline"]["latency_ms"]["p50"])
        assert row["accuracy"]["failures"] == [], row["accuracy"]
    float_acc = rows["mobilenet_v1_0.25_128_seeded_float.tflite"]["accuracy"]
    assert float_acc["top1_agreement"] == 1.0 and float_acc["max_abs_error"] < 1e-4 and float_acc["snr_db"] > 60
    int8 = rows["mobilenet_v1_0.25_128_seeded_int8.tflite"]
    assert int8["precision"] == "INT8" and int8["accuracy"]["max_error_steps"] <= 2   # bit-exact arithmetic
    asr = rows["lstm_asr_seeded_hybrid.tflite"]
    assert asr["kind"] == "sequence" and 0.99 < asr["accuracy"]["frame_cosine_min"] <= 1.0
    assert "PASSED" in proc.stderr and "mobilenet_v1_0.25_128_seeded_int8.tflite" in proc.stdout


def test_gate_passes_on_a_clean_rerun(clean, models, tmp_path):
    tmp, _, _ = clean
    thresholds = tmp_path / "thresholds.toml"
    # Generous: a rerun on a loaded shared machine can take twice as long (the slowdown test below
    # checks that the gate does catch a regression).
    thresholds.write_text("[latency]\nmedian_regression_max = 4.0\nnoise_floor_ms = 20.0\n")
    rerun, proc = bench_json(tmp_path, "rerun", models, "--driver", "reference")
    gate = nnts("gate", tmp_path / "rerun.json", "--baseline", tmp / "clean.json", "--thresholds", thresholds)
    assert gate.returncode == 0, gate.stdout
    assert "0 violation(s) in 3 model(s)" in gate.stdout


def test_gate_fails_on_an_accuracy_regression(models, tmp_path):
    results, proc = bench_json(tmp_path, "broken", models[:1], "--driver", "tests.test_bench:ShiftedSoftmax",
                               "--junitxml", tmp_path / "broken.xml")
    assert proc.returncode == 1   # bench itself reports the failing criteria
    assert results["models"][0]["status"] == "failed"
    suite = ET.parse(tmp_path / "broken.xml").getroot().find("testsuite")
    (case,) = suite.iter("testcase")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("nnts-bench", "1", "1")
    assert case.get("name") == models[0].name and "top1_agreement" in case.find("failure").text
    gate = nnts("gate", tmp_path / "broken.json")
    assert gate.returncode == 1
    assert "mobilenet_v1_0.25_128_seeded_float.tflite: accuracy: top1_agreement 0 < 0.85" in gate.stdout


def test_gate_fails_on_a_slowdown(clean, models, tmp_path):
    tmp, before, _ = clean
    slow, _ = bench_json(tmp_path, "slow", models[:1], "--driver", "tests.test_bench:SlowSoftmax")
    assert slow["models"][0]["accuracy"]["failures"] == []
    assert slow["models"][0]["driver"]["latency_ms"]["p50"] >= SLEEP_S * 1e3
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text("[latency]\nmedian_regression_max = 1.0\nnoise_floor_ms = 5.0\n")
    gate = nnts("gate", tmp_path / "slow.json", "--baseline", tmp / "clean.json", "--thresholds", thresholds)
    assert gate.returncode == 1
    assert "mobilenet_v1_0.25_128_seeded_float.tflite: latency: median" in gate.stdout
    assert gate.stdout.count("latency") == 1   # the other models are not in the new results


def test_gate_thresholds_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[accuracy]\ntop1_agreemnt_min = 0.5\n")
    with pytest.raises(ValueError, match="top1_agreemnt_min"):
        bench_gate.load_thresholds(str(bad))
    ok = tmp_path / "ok.toml"
    ok.write_text('[models."lstm_*"]\nsnr_db_min = 10\n')
    t = bench_gate.load_thresholds(str(ok))
    assert bench_gate.criteria_for("lstm_x.tflite", t)["snr_db_min"] == 10
    assert bench_gate.criteria_for("mobilenet.tflite", t)["snr_db_min"] == 20.0


def no_softmax():
    return SubsetDevice("no-softmax", [op for op in OperationCode if op != OperationCode.SOFTMAX])


def test_partial_support_and_refused_models_are_rows(models, tmp_path):
    """A driver without SOFTMAX: the share of operations and of time on it; a model with an
    operator the importer does not map (CUMSUM): a row naming it, TFLite still timed."""
    g = builder.GraphBuilder("cumsum")
    x = g.tensor("x", (1, 8))
    axis = g.tensor("axis", (), "int32", np.array(1, np.int32))
    y = g.tensor("y", (1, 8))
    g.op("CUMSUM", [x, axis], [y], builder.options("CumsumOptions", exclusive=False, reverse=False))
    refused = tmp_path / "cumsum.tflite"
    refused.write_bytes(g.finish([x], [y]))
    settings = bench.Settings(warmup=1, runs=4, max_time=10)
    with using_drivers([no_softmax()]):
        results = bench.run([(models[0], None), (refused, None)], "no_softmax", settings)
    row, bad = results["models"]
    assert row["operations"]["unsupported"] == {"SOFTMAX": 1}
    assert row["operations"]["on_driver"] == row["operations"]["total"] - 1
    assert row["operations"]["by_device"]["nnapi-reference"] == 1
    assert 0.5 < row["time_on_driver"] < 1.0
    assert "SOFTMAX" in row["reason"] and row["accuracy"]["failures"] == []
    assert bad["status"] == "skipped" and re.search(r"CUMSUM|builtin operator 128", bad["reason"])
    assert bad["driver"] is None and bad["baseline"]["latency_ms"]["runs"] == 4


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium) to render the report")
def test_html_report_in_headless_chromium(clean):
    tmp, results, _ = clean
    page = (tmp / "bench.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp / 'chromium-profile'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    html = dom.stdout
    n = len(results["models"])
    assert html.count('class="chart histogram"') == n and html.count('class="chart percentiles"') == n
    # 20 bins per runtime in each histogram, p50/p90/p99 per runtime, one ratio bar per model
    bars = [svg.count('class="bar"') for svg in html.split("<svg")[1:]]
    assert sorted(bars) == sorted([2 * bench.HISTOGRAM_BINS] * n + [6] * n + [n])
    assert "Stress tests (stress.json)" in html and "VmRSS grew 20 MiB" in html
    shot = ROOT / "out" / "bench-report.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    snap = subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1400,2400", page],
                          capture_output=True, text=True, timeout=120)
    assert snap.returncode == 0 and shot.stat().st_size > 10_000, snap.stderr[-2000:]


def _acc(top1: float, snr: float) -> dict:
    return {"top1_agreement": top1, "top5_agreement": 1.0, "max_abs_error": 0.1, "snr_db": snr, "max_error_steps": 2}


def test_gate_judges_a_quantized_model_by_either_convention_not_neither():
    thresholds = bench_gate.load_thresholds(None)
    nnapi_ok = dict(_acc(1.0, 40.0), explained=True)
    assert bench_gate.model_accuracy_failures("m", dict(_acc(0.75, 17.5), nnapi_convention=nnapi_ok), thresholds) == []
    # The gap to TFLite is not the documented conventions (the reference in TFLite's convention misses too).
    unexplained = dict(nnapi_ok, explained=False)
    assert bench_gate.model_accuracy_failures("m", dict(_acc(0.75, 17.5), nnapi_convention=unexplained),
                                              thresholds) == ["top1_agreement 0.75 < 0.85", "snr_db 17.5 < 20"]
    # Wrong against both conventions.
    neither = dict(_acc(0.5, 10.0), explained=True)
    assert bench_gate.model_accuracy_failures("m", dict(_acc(0.75, 17.5), nnapi_convention=neither), thresholds)


def test_reference_passes_its_own_gate_where_nnapi_and_tflite_arithmetic_differ(tmp_path):
    """The seeded int8 MobileNet v2 (quantized MEAN, which NNAPI truncates and TFLite rounds): the
    reference passes its gate; where it misses the criteria against TFLite (how far TFLite's
    rounding moves the top-1 differs between ai-edge-litert releases: below 0.85 with some, 0.875
    with 2.3), it meets them against NNAPI's arithmetic and the reference in TFLite's convention
    shows the gap is the conventions; a wrong driver still fails."""
    model = seeded_models(tmp_path / "seeded", ["mobilenet_v2_0.35_96_seeded"])
    int8 = [p for p in model if p.name.endswith("_int8.tflite")]
    results, proc = bench_json(tmp_path, "v2", int8, "--driver", "reference")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    acc = results["models"][0]["accuracy"]
    assert acc["failures"] == [] and acc["top1_agreement"] < 1.0  # a gap, within the criteria or explained
    if "nnapi_convention" in acc:  # missed against TFLite: the conventions explain all of it
        assert acc["nnapi_convention"]["explained"] and acc["nnapi_convention"]["max_error_steps"] == 0
    assert nnts("gate", tmp_path / "v2.json").returncode == 0
    results, proc = bench_json(tmp_path, "wrong", int8, "--driver", "tests.test_bench:ShiftedSoftmax")
    assert proc.returncode == 1 and results["models"][0]["accuracy"]["nnapi_convention"]["failures"]
    assert nnts("gate", tmp_path / "wrong.json").returncode == 1
