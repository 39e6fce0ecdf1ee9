"""A generated test runs its test model's variants in turn (nnts/runners/variants.py): its verdict, the
variants' own results and ids in the report, --expected-failures by variant, and --variants."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from nnts.reports.results import pytest_replay, records_of_report, summarize
from nnts.runners import variants
from nnts.runners.cases import MODEL_VARIANTS, TWIN_VARIANTS
from nnts.runners.variants import VariantResult, conclude, run_variant
from nnts.vts.test_generated import FAILING_VARIANTS, SUBSET_VARIANTS

ROOT = Path(__file__).resolve().parents[1]
BROKEN_ADD_QUANT8 = "nnapi_ref.drivers.broken:wrong_add_quant8"
MODEL = "nnts_add_quant8_relu"
TEST_ID = f"ADD-TENSOR_QUANT8_ASYMM-{MODEL}"


def _node():
    return SimpleNamespace(user_properties=[])


def _variants_property(node) -> list:
    return json.loads(dict(node.user_properties)[variants.PROPERTY])


def test_every_variant_of_cts_and_vts_is_known_to_the_option():
    names = {v.replace("-", "_") for v in (*MODEL_VARIANTS, *TWIN_VARIANTS, *SUBSET_VARIANTS, *FAILING_VARIANTS)}
    assert names == set(variants.KNOWN)


def test_run_variant_turns_what_a_test_raises_into_a_result():
    def skip_unsupported():
        pytest.skip("unsupported: ABS")

    def fail():
        pytest.fail("output 0: 4 of 4 elements outside tolerance")

    def assertion():
        assert 1 == 2, "one is not two"

    def driver_bug():
        raise KeyError("pool 3")

    results = [run_variant(name, call) for name, call in
               (("sync", lambda: None), ("async", skip_unsupported), ("burst", fail), ("fenced", assertion),
                ("dynamic", driver_bug))]
    assert [r.status for r in results] == ["passed", "unsupported", "failed", "failed", "failed"]
    assert results[2].message == "output 0: 4 of 4 elements outside tolerance"
    assert "one is not two" in results[3].message
    assert "KeyError: 'pool 3'" in results[4].message and "driver_bug" in results[4].message  # where it came from


def test_a_timeout_of_the_test_is_not_taken_for_a_variant_failure():
    def timed_out():
        pytest.fail("Timeout (>300.0s) from pytest-timeout.")
    with pytest.raises(pytest.fail.Exception):
        run_variant("sync", timed_out)


def test_the_test_fails_naming_each_failing_variant_and_keeps_every_result():
    node = _node()
    results = [VariantResult("sync", "passed"), VariantResult("async", "failed", "execute: GENERAL_FAILURE"),
               VariantResult("cached", "skipped", "no cache"), VariantResult("burst", "failed", "output 0: wrong")]
    with pytest.raises(pytest.fail.Exception) as failure:
        conclude(node, "ADD TENSOR_FLOAT32, test model m", results, {})
    assert failure.value.msg.splitlines() == ["ADD TENSOR_FLOAT32, test model m: async, burst (2 of 4 variants) failed",
                                              "[async] execute: GENERAL_FAILURE", "[burst] output 0: wrong"]
    assert [(v, s) for v, s, _, _ in _variants_property(node)] == \
        [("sync", "passed"), ("async", "failed"), ("cached", "skipped"), ("burst", "failed")]


def test_listed_variants_are_expected_failures_and_flagged_when_they_pass():
    node = _node()
    results = [VariantResult("sync", "failed", "wrong"), VariantResult("async", "passed")]
    with pytest.raises(pytest.xfail.Exception):
        conclude(node, "t", results, {"sync": "known issue", "async": "known issue"})
    assert [(v, s) for v, s, _, _ in _variants_property(node)] == [("sync", "xfailed"), ("async", "xpassed")]
    # one listed, another failing: the test fails, naming only the unexpected failure
    node = _node()
    results = [VariantResult("sync", "failed", "wrong"), VariantResult("async", "failed", "also wrong")]
    with pytest.raises(pytest.fail.Exception) as failure:
        conclude(node, "t", results, {"sync": "known issue"})
    assert "[async] also wrong" in failure.value.msg and "[sync]" not in failure.value.msg


def test_a_test_whose_variants_were_all_skipped_is_skipped_and_one_that_ran_one_passes():
    with pytest.raises(pytest.skip.Exception, match="unsupported: ABS"):
        conclude(_node(), "t", [VariantResult("sync", "unsupported", "unsupported: ABS"),
                                VariantResult("async", "unsupported", "unsupported: ABS")], {})
    conclude(_node(), "t", [VariantResult("sync", "passed"), VariantResult("cached", "skipped", "no cache")], {})


def _report(nodeid, outcome, properties):
    return SimpleNamespace(nodeid=nodeid, when="call", outcome=outcome, passed=outcome == "passed",
                           failed=outcome == "failed", skipped=outcome == "skipped", longrepr=None,
                           longreprtext="", duration=0.5, user_properties=properties)


def test_the_report_has_a_record_per_variant_with_its_id_and_pytest_counts_the_test_once():
    nodeid = f"cts/test_generated.py::test_generated[{TEST_ID}]"
    ran = [["sync", "passed", "", 0.1], ["async", "failed", "wrong\nreproducer: r.json\nreplay: nnts vectors run "
                                         "r.json --driver x --mode async", 0.2], ["cached", "unsupported", "no", 0.1]]
    props = {"nnts_op": "ADD", "nnts_dtype": "TENSOR_QUANT8_ASYMM", "nnts_module": "cts/test_generated",
             variants.PROPERTY: json.dumps(ran)}
    records = records_of_report(_report(nodeid, "failed", list(props.items())), props)
    assert [(r["id"], r["test"], r["variant"], r["status"]) for r in records] == [
        (f"cts/test_generated.py::test_generated[{TEST_ID}-{v}]", nodeid, v, s) for v, s in
        (("sync", "passed"), ("async", "failed"), ("cached", "unsupported"))]
    assert records[1]["reproducer"] == "r.json" and records[1]["replay"].endswith("--mode async")
    assert all(r["op"] == "ADD" and r["part"] == "CTS generated" for r in records)
    summary = summarize(records)
    assert {k: n for k, n in summary["totals"].items() if n} == {"passed": 1, "failed": 1, "unsupported": 1}
    assert {k: n for k, n in summary["pytest"].items() if n} == {"failed": 1}
    # The driver died in the test: the test's own verdict, one record.
    crashed = dict(props, nnts_verdict="crashed")
    records = records_of_report(_report(nodeid, "failed", list(crashed.items())), crashed)
    assert [(r["id"], r["status"]) for r in records] == [(nodeid, "crashed")]


def pytest_run(tmp_path, *args):
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pytest", "cts/test_generated.py", "vts/test_generated.py", "-q", "-p",
               "no:cacheprovider", "--no-shared-vectors", "--reproducers", str(tmp_path / "reproducers"),
               "--report", str(report), *args]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    tests = json.loads(report.read_text())["tests"] if report.exists() else []
    return done.returncode, done.stdout + done.stderr, {t["id"]: t for t in tests}


def test_a_variant_listed_by_its_id_is_an_expected_failure_and_the_others_still_count(tmp_path):
    listed = tmp_path / "expected.txt"
    listed.write_text(f"{TEST_ID}-sync  # known: the synchronous path\n")
    code, output, records = pytest_run(tmp_path, "--driver", BROKEN_ADD_QUANT8, "--expected-failures", str(listed),
                                       "-k", f"{MODEL} and not twin", "--variants", "sync,async")
    assert code == 1, output[-3000:]
    assert f"{MODEL} from" in output and "async (1 of 2 variants) failed" in output, output[-3000:]
    cts = f"cts/test_generated.py::test_generated[{TEST_ID}"
    assert records[f"{cts}-sync]"]["status"] == "xfailed" and records[f"{cts}-async]"]["status"] == "failed"
    # Both listed (by the test's id): the test is an expected failure.
    listed.write_text(f"{TEST_ID}  # known\n")
    code, output, records = pytest_run(tmp_path, "--driver", BROKEN_ADD_QUANT8, "--expected-failures", str(listed),
                                       "-k", f"{MODEL} and not twin", "--variants", "sync,async")
    assert code == 0 and re.search(r"\b2 xfailed", output), output[-3000:]  # CTS and VTS
    # CTS's two variants and VTS's one (this model is not the first of its file: VTS runs it synchronously)
    assert {r["status"] for r in records.values()} == {"xfailed"} and len(records) == 3


def test_variants_runs_only_the_chosen_variants(tmp_path):
    code, output, records = pytest_run(tmp_path, "-k", MODEL, "--variants", "burst,device-memory")
    assert code == 0, output[-3000:]
    # VTS runs this model synchronously only: it has no test left; the signed twin has none either
    assert sorted(records) == [f"cts/test_generated.py::test_generated[{TEST_ID}-{v}]" for v in ("burst", "device_memory")]
    assert re.search(r"\b1 passed", output), output[-2000:]


def test_an_unknown_variant_is_one_usage_line(tmp_path):
    code, output, _ = pytest_run(tmp_path, "--variants", "sync,asynchronous")
    assert code == 4 and "asynchronous: not a variant; the variants are sync, async" in output, output[-2000:]
    assert "Traceback" not in output


def test_a_failing_variant_replays_alone():
    options = {"driver": "reference", "vectors": [], "no_shared_vectors": True, "isolate": False, "feature_level": None}
    config = SimpleNamespace(getoption=options.get)
    test = f"vts/test_generated.py::test_generated[{TEST_ID}]"
    assert pytest_replay(config, test, "device_memory") == \
        f"pytest '{test}' --driver reference --variants device_memory --no-shared-vectors"
