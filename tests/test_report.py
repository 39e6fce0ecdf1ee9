"""The conformance report (reports/results.py, reports/conformance.py): every test counted with
pytest's own verdict, under xdist too; the matrix of value-computing tests; failures with their
message and replay command; the JSON read back by --baseline, `nnts report merge` and
`nnts bench --include`."""
import json
import os
import re
import subprocess
import sys

import pytest

from nnts import cli
from nnts.formats.results import included
from nnts.reports import bench, conformance, results

# One test of each verdict pytest knows, in a module the report files under "CTS API and runtime".
EVERY_VERDICT = '''
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_passes():
    pass

def test_fails():
    pytest.fail("worst at [0]: expected 1, got 2, |diff| 1 > tolerance 0\\nreplay: nnts vectors run out/r.json --driver d",
                pytrace=False)

def test_unsupported():
    pytest.skip("unsupported: ADD TENSOR_FLOAT32")

def test_skipped():
    pytest.skip("needs something else")

@pytest.mark.xfail(reason="a known issue")
def test_xfails():
    assert False

@pytest.mark.xfail(reason="a known issue")
def test_xpasses():
    pass

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown):
    pass
'''
PYTEST_SUMMARY = re.compile(r"^=* ?(\d+ \w+.*?) in [\d.]+s", re.M)


def pytest_summary(output: str) -> dict:
    """pytest's last line (``1 failed, 2 passed, ... in 0.1s``) as {status: n}."""
    line = PYTEST_SUMMARY.findall(output)[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", line)}
    counts["error"] = counts.pop("errors", counts.pop("error", 0))
    return {k: counts.get(k, 0) for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}


def run_pytest(folder, *args):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    return done.stdout + done.stderr


@pytest.fixture
def every_verdict(tmp_path):
    (tmp_path / "cts").mkdir()
    (tmp_path / "cts" / "test_api.py").write_text(EVERY_VERDICT)
    return tmp_path


@pytest.mark.parametrize("workers", ["0", "2"])
def test_totals_equal_pytests_summary_for_every_verdict(every_verdict, workers):
    output = run_pytest(every_verdict, "cts/test_api.py", "-n", workers, "--report", "out/r.json",
                        "--report", "out/r.html")
    data = json.loads((every_verdict / "out" / "r.json").read_text())
    assert data["schema"] == "nnts-conformance/2"
    assert data["pytest"] == pytest_summary(output), output[-2000:]
    status = {t["id"].split("::")[-1]: t["status"] for t in data["tests"]}
    assert status == {"test_passes": "passed", "test_fails": "failed", "test_unsupported": "unsupported",
                      "test_skipped": "skipped", "test_xfails": "xfailed", "test_xpasses": "xpassed",
                      "test_setup_error": "error", "test_teardown_error": "passed",
                      "test_teardown_error (teardown)": "error"}
    assert set(data["parts"]) == {"CTS API and runtime"} and data["matrix"] == {}
    failed = next(t for t in data["tests"] if t["status"] == "failed")
    assert "worst at [0]: expected 1, got 2" in failed["message"] and "[gw" not in failed["message"]
    # Its message names a "reproducer" nnts did not save (out/r.json, outside the run's reproducer
    # folder): not taken, and the replay is the pytest command, not the message's text.
    assert failed["reproducer"] is None and failed["replay"].startswith("pytest cts/test_api.py::test_fails --driver")
    assert data["meta"]["command"].startswith("pytest ") and "cts/test_api.py -n" in data["meta"]["command"] and data["meta"]["machine"]["cores"]
    page = (every_verdict / "out" / "r.html").read_text()
    assert f'<span id="pytest-summary">{", ".join(f"{n} {k}" for k, n in data["pytest"].items() if n)}</span>' in page
    assert "worst at [0]: expected 1, got 2" in page and "<th>replay</th><td><code>pytest cts/test_api.py::test_fails" in page


def record(nodeid, status, op=None, dtype=None, variant=None):
    return {"id": nodeid, "part": results.part_of(nodeid), "op": op, "dtype": dtype, "variant": variant,
            "status": status, "phase": "call", "duration_s": 0.0, "message": None, "reproducer": None, "replay": None}


def test_matrix_counts_only_tests_that_compute_values():
    # A driver of ADD only: ABS's validation tests pass by rejecting invalid models, its
    # generated tests are unsupported. ABS must read unsupported, not partly supported.
    tests = [record("cts/test_generated.py::test_generated[ADD-TENSOR_FLOAT32-a-sync]", "passed", "ADD", "TENSOR_FLOAT32", "sync"),
             record("vts/test_generated.py::test_generated[ABS-TENSOR_FLOAT16-b-sync]", "unsupported", "ABS", "TENSOR_FLOAT16", "sync"),
             record("vts/test_validate_model.py::test_invalid[ABS-TENSOR_FLOAT16-b-x]", "passed", "ABS", "TENSOR_FLOAT16"),
             record("cts/test_random_graph.py::test_random_graph[seed3]", "failed"),
             record("vts/test_qos.py::test_deadline", "passed")]
    summary = results.summarize(tests)
    assert conformance.cell_class(summary["matrix"]["ABS"]["TENSOR_FLOAT16"]) == "unsupported"
    assert summary["matrix"]["ABS"]["TENSOR_FLOAT16"]["passed"] == 0
    assert summary["validation"]["ABS"]["passed"] == 1
    assert summary["matrix"]["(random graphs)"]["mixed"]["failed"] == 1
    assert summary["parts"]["QoS"]["passed"] == 1 and summary["paths"]["sync"]["passed"] == 1
    assert summary["pytest"] == {"passed": 3, "failed": 1, "error": 0, "skipped": 1, "xfailed": 0, "xpassed": 0}
    assert summary["unsupported"] == {"ABS": {"TENSOR_FLOAT16": 1}}


def test_baseline_names_newly_failing_passing_and_unsupported(every_verdict):
    run_pytest(every_verdict, "cts/test_api.py", "-n", "0", "--report", "out/before.json")
    source = every_verdict / "cts" / "test_api.py"
    source.write_text(EVERY_VERDICT.replace("def test_passes():\n    pass", "def test_passes():\n    assert 0")
                      .replace("    pytest.fail(\"worst", "    return\n    pytest.fail(\"worst").replace('pytest.skip("needs something else")',
                                                                              'pytest.skip("unsupported: MUL")'))
    run_pytest(every_verdict, "cts/test_api.py", "-n", "0", "--report", "out/after.json", "--report", "out/after.html",
               "--baseline", "out/before.json")
    data = json.loads((every_verdict / "out" / "after.json").read_text())
    names = {k: [i.split("::")[-1] for i in v] for k, v in data["baseline"].items() if k != "path"}
    assert names == {"newly_failing": ["test_passes"], "newly_passing": ["test_fails"],
                     "newly_unsupported": ["test_skipped"]}
    assert "Newly failing: 1" in (every_verdict / "out" / "after.html").read_text()
    output = run_pytest(every_verdict, "cts/test_api.py", "--baseline", "out/missing.json")
    assert "--baseline: out/missing.json: cannot read" in output and "Traceback" not in output


def test_merge_adds_up_shards(tmp_path, capsys):
    meta = {"started": "2026-01-01T10:00:00", "duration_s": 60, "drivers": [{"name": "d"}], "driver_spec": "d"}
    a = results.to_json(dict(meta), [record("cts/test_api.py::a", "passed"), record("cts/test_api.py::b", "failed")])
    b = results.to_json(dict(meta, started="2026-01-01T10:00:30"), [record("cts/test_api.py::c", "unsupported")])
    for name, data in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(data))
    code = cli.main(["report", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                     "--json", str(tmp_path / "m.json"), "--html", str(tmp_path / "m.html")])
    assert code == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["totals"]["passed"] == 1 and merged["totals"]["failed"] == 1 and merged["totals"]["unsupported"] == 1
    assert len(merged["tests"]) == 3 and [d["name"] for d in merged["meta"]["drivers"]] == ["d"]
    assert merged["meta"]["duration_s"] == 90 and merged["meta"]["started"] == "2026-01-01T10:00:00"
    assert "1 passed, 1 failed, 1 skipped" in (tmp_path / "m.html").read_text()
    (tmp_path / "old.json").write_text(json.dumps({"schema": "nnts-conformance/1", "totals": {}}))
    assert cli.main(["report", "merge", str(tmp_path / "old.json"), "--json", str(tmp_path / "x.json")]) == 2
    assert "schema 1 has no per-test results" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    unwritable = tmp_path / "a.json" / "m.json"  # under a file
    assert cli.main(["report", "merge", str(tmp_path / "a.json"), "--json", str(unwritable)]) == 2
    err = capsys.readouterr().err  # refused before anything is read or written
    assert f"--json {unwritable}: the folder {tmp_path / 'a.json'} does not exist" in err and err.count("\n") == 1


def test_bench_includes_schema_2_and_schema_1(tmp_path):
    tests = [record("cts/test_generated.py::test_generated[ADD-TENSOR_FLOAT32-a-sync]", "passed", "ADD", "TENSOR_FLOAT32"),
             dict(record("cts/test_generated.py::test_generated[MUL-TENSOR_FLOAT32-b-sync]", "crashed", "MUL",
                         "TENSOR_FLOAT32"), replay="nnts vectors run b.json --driver d")]
    (tmp_path / "v2.json").write_text(json.dumps(results.to_json({"driver_spec": "d"}, tests)))
    (tmp_path / "v1.json").write_text(json.dumps({
        "schema": "nnts-conformance/1", "driver": "d", "totals": {"pass": 1, "crash": 1},
        "matrix": {"ADD": {"TENSOR_FLOAT32": {"pass": 1, "crash": 0}}, "MUL": {"TENSOR_FLOAT32": {"pass": 0, "crash": 1}}},
        "failures": ["CRASH cts/test_generated.py::test_generated[MUL-TENSOR_FLOAT32-b-sync]"]}))
    for name in ("v2.json", "v1.json"):
        part = included(str(tmp_path / name))
        assert part["kind"] == "conformance" and not part["ok"]
        assert part["data"]["totals"]["crashed"] == 1 and part["data"]["failures"][0]["status"] == "crashed"
        run = {"models": [], "driver": "d", "generated": "now", "devices": ["d"], "baseline": "none",
               "settings": {"runs": 1, "warmup": 0, "max_time_s": 1, "inflight": 1}, "environment": {}}
        page = bench.render(run, [str(tmp_path / name)])
        assert "crashed <code>cts/test_generated.py::test_generated[MUL-TENSOR_FLOAT32-b-sync]" in page


def test_driver_page_summarizes_every_result_of_the_driver(tmp_path, capsys):
    tests = [record("cts/test_generated.py::test_generated[ADD-TENSOR_FLOAT32-a-sync]", "passed", "ADD", "TENSOR_FLOAT32")]
    (tmp_path / "conformance.json").write_text(results.dumps(results.to_json({"driver_spec": "d"}, tests)))
    (tmp_path / "stress.json").write_text(json.dumps([
        {"name": "memory_soak", "verdict": "FAILURE", "seconds": 3.0, "message": "VmRSS grew 20 MiB"},
        {"name": "repeated_load_unload", "verdict": "SUCCESS", "seconds": 1.0, "message": "ok"}]))
    (tmp_path / "vectors.json").write_text(json.dumps({"passed": 1, "failed": 0, "skipped": 0, "results": [
        {"name": "a", "status": "pass", "message": ""}]}))
    (tmp_path / "bench.json").write_text(json.dumps({"schema": "nnts-bench/1", "models": [
        {"model": "m.tflite", "status": "ok", "ratio": 2.0, "accuracy": {"failures": []}},
        {"model": "n.tflite", "status": "driver_error", "reason": "prepare failed", "accuracy": None}]}))
    paths = [str(tmp_path / n) for n in ("conformance.json", "stress.json", "vectors.json", "bench.json")]
    assert cli.main(["report", "page", *paths, "--html", str(tmp_path / "page.html")]) == 0
    page = (tmp_path / "page.html").read_text()
    glance = page[page.index("This driver at a glance"):page.index('<h2 id="totals">')]
    assert re.search(r"Stress tests \(stress.json\).*?failures.*?1 FAILURE, 1 SUCCESS", glance, re.S), glance
    assert re.search(r"Test vectors.*?all pass.*?1 passed, 0 failed", glance, re.S), glance
    assert re.search(r"Benchmark \(bench.json\).*?failures.*?2 models, 1 run, 1 failing.*?x2.00", glance, re.S), glance
    assert "VmRSS grew 20 MiB" in page and "prepare failed" in page
    (tmp_path / "other.json").write_text(json.dumps({"something": "else"}))
    assert cli.main(["report", "page", paths[0], str(tmp_path / "other.json"), "--html", str(tmp_path / "x.html")]) == 2
    assert "other.json: not a conformance, stress, vectors or bench JSON file" in capsys.readouterr().err
    assert cli.main(["report", "page", paths[1], "--html", str(tmp_path / "x.html")]) == 2
    assert "needs at least one conformance JSON file" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
