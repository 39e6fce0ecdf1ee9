"""The conformance page leads with what to fix: the failures first, the variants of a test that
fail the same way as one entry ("failed in sync, burst, fenced") with cause, parameters, replay
and graph; then the totals, the matrix and the unsupported tests with why; no unexplained "-"
type or "(none)" operation; the command shown is the one typed; no path of the machine that made
the page."""
import json
import os
import subprocess
import sys
from pathlib import Path

from nnts.reports import conformance, results

ROOT = Path(__file__).resolve().parents[1]
TEST = "cts/test_generated.py::test_generated[ADD-TENSOR_QUANT8_ASYMM-add_q8]"


def record(variant, status, message=None, **more):
    base = {"id": f"{TEST[:-1]}-{variant}]", "test": TEST, "part": "CTS generated", "op": "ADD",
            "dtype": "TENSOR_QUANT8_ASYMM", "variant": variant, "status": status, "phase": "call", "duration_s": 0,
            "message": message, "reproducer": None, "replay": None, "graph": None,
            "parameters": "ADD (fused activation RELU1)"}
    return dict(base, **more)


def failing_run(folder: Path) -> dict:
    worst = "output 0: 3 of 4 elements outside tolerance; worst at [1]: expected 3, got 5, |diff| 2 > tolerance 1"
    reproducer = folder / "reproducers" / "add_q8.json"
    tests = [record(v, "failed", f"{worst}\nreproducer: {reproducer}\nreplay: nnts vectors run {reproducer} --mode {v}",
                    reproducer=str(reproducer), replay=f"nnts vectors run {reproducer} --driver d --mode {v}")
             for v in ("sync", "burst", "fenced")]
    tests += [record("async", "failed", "execute: OP_FAILED: the driver gave up"), record("cached", "passed")]
    tests += [{"id": "cts/test_sequences.py::test_swap", "test": "cts/test_sequences.py::test_swap",
               "part": "execution sequences", "op": None, "dtype": "-", "variant": None, "status": "unsupported",
               "phase": "call", "duration_s": 0, "message": "unsupported: MUL on TENSOR_FLOAT32, feature level 27",
               "reproducer": None, "replay": None, "graph": None, "parameters": None}]
    meta = {"driver_spec": "d", "command": "nnts test --driver d", "corpora": [{"path": str(ROOT / "cts" / "corpus"),
                                                                               "models": 3}]}
    return results.to_json(meta, tests)


def test_variants_failing_the_same_way_are_one_entry_and_lead_the_page(tmp_path):
    data = failing_run(tmp_path)
    entries = [e for group in conformance.failure_entries(data).values() for e in group]
    assert [(e["variants"], e["of"]) for e in entries] == [(["sync", "burst", "fenced"], 5), (["async"], 5)]
    assert entries[0]["cause"].startswith("output 0: 3 of 4 elements outside tolerance; worst at [1]")
    page = conformance.render(data, folder=tmp_path)
    assert "failed in sync, burst, fenced (3 of 5 variants)" in page and "ADD (fused activation RELU1)" in page
    order = [page.index(f'<h2 id="{section}">') for section in ("failures", "totals", "support", "unsupported")]
    assert order == sorted(order)
    for variant in ("sync", "burst", "fenced", "async"):  # every variant's id is an anchor the matrix links to
        assert f'id="f-{TEST[:-1]}-{variant}]"' in page


def test_no_unexplained_dash_type_or_none_operation(tmp_path):
    data = failing_run(tmp_path)
    assert data["unsupported"] == {"execution sequences": {results.ANY_TYPE: 1}}
    page = conformance.render(data, folder=tmp_path)
    assert "(none)" not in page and ">-<" not in page
    assert "the driver ran no test of this operation" in page


def test_the_page_carries_no_path_of_the_machine(tmp_path):
    page = conformance.render(failing_run(tmp_path), folder=tmp_path)
    assert str(tmp_path) not in page and str(ROOT) not in page and str(Path.home()) + "/" not in page
    assert "nnts vectors run reproducers/add_q8.json --driver d --mode sync" in page  # relative to the page
    assert "<code>cts/corpus</code>" in page


def test_the_command_shown_is_the_one_typed(tmp_path):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    typed = ["test", "cts", "--driver", "reference", "-k", "nnts_add_float32", "--variants", "sync",
             "--no-shared-vectors", "-q", "--report", "out/r.json"]
    done = subprocess.run([sys.executable, "-m", "nnts", *typed], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    meta = json.loads((tmp_path / "out" / "r.json").read_text())["meta"]
    assert meta["command"] == "nnts " + " ".join(typed)


def test_the_benchmark_page_carries_no_path_of_the_machine(tmp_path):
    from nnts.reports import bench
    row = {"model": "m.tflite", "path": str(tmp_path / "models" / "m.tflite"), "family": "m", "origin": "real",
           "status": "skipped", "reason": f"importer: {tmp_path}/models/m.tflite: operator 128 not mapped",
           "input_source": f"no input data of shape [1, 8] in {tmp_path}/models", "inputs": "synthetic",
           "driver": None, "baseline": None, "accuracy": None, "operations": None, "time_on_driver": None}
    results = {"schema": "nnts-bench/2", "generated": "now", "driver": "d", "devices": ["d"], "baseline": "none",
               "settings": {"warmup": 1, "runs": 1, "max_time_s": 1, "inflight": 4, "samples": 1},
               "environment": {"cpu": "x", "cores": 2}, "models": [row]}
    page = bench.render(results, [], tmp_path)
    assert str(tmp_path) not in page and "importer: models/m.tflite: operator 128 not mapped" in page
