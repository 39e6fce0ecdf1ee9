"""The test-vector format, NNAPI's tolerances, and `nnts vectors run`."""
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from nnapi_ref import vectors
from nnapi_ref.runtime import get_devices
from nnapi_ref.tolerance import compare, compare_multinomial
from nnapi_ref.types import OperandCode as T
from nnts import cli
from nnts.runners.model_runner import build_model, run_test


def operand(type_, dims, lifetime, data=None, scale=0.0, zero_point=0):
    return {"type": type_, "dimensions": dims, "scale": scale, "zero_point": zero_point, "lifetime": lifetime,
            "is_ignored": False, "channel_quant": None, "data": data}


def add_test(name, a, b, expected, expect_failure=False):
    return {"name": name, "min_feature_level": 27, "expect_failure": expect_failure, "is_relaxed": False,
            "expected_multinomial_distribution_tolerance": 0.0,
            "main": {"operands": [operand("TENSOR_FLOAT32", [2], "SUBGRAPH_INPUT", a),
                                  operand("TENSOR_FLOAT32", [2], "SUBGRAPH_INPUT", b),
                                  operand("INT32", [], "CONSTANT_COPY", [0]),
                                  operand("TENSOR_FLOAT32", [2], "SUBGRAPH_OUTPUT", expected)],
                     "operations": [{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}],
                     "input_indexes": [0, 1], "output_indexes": [3]},
            "referenced": []}


def write(path, tests):
    path.write_text(json.dumps({"format": "nnapi-test-vector/1", "source": "test.mod.py", "license": "-",
                                "tests": tests}))
    return path


def test_decode_special_floats_and_types():
    values = vectors.decode_data(["NaN", "Infinity", "-Infinity", 0.1], T.TENSOR_FLOAT32, "x")
    assert math.isnan(values[0]) and values[1] == np.inf and values[2] == -np.inf
    assert values[3] == np.float32(0.1) and values.dtype == np.float32
    assert vectors.decode_data([True, False], T.TENSOR_BOOL8, "x").tolist() == [True, False]
    with pytest.raises(vectors.FormatError):
        vectors.decode_data([300], T.TENSOR_QUANT8_ASYMM, "x")


def test_round_trip_preserves_the_model(tmp_path):
    path = write(tmp_path / "a.json", [add_test("a", [1.5, "NaN"], [2, 3], [3.5, "NaN"])])
    (test,) = vectors.load_file(path)
    out = tmp_path / "b.json"
    vectors.write_file(out, [test])
    (again,) = vectors.load_file(out)
    assert again.name == "a" and again.model.main.operations[0].type.name == "ADD"
    np.testing.assert_array_equal(again.inputs[0], test.inputs[0])
    np.testing.assert_array_equal(again.expected[0], test.expected[0])


def test_files_that_are_not_test_vectors_are_rejected(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(vectors.FormatError):
        vectors.load_file(bad)
    bad.write_text("not json")
    with pytest.raises(vectors.FormatError):
        vectors.load_file(bad)


def test_harness_passes_fails_and_expects_failure(tmp_path):
    path = write(tmp_path / "a.json", [add_test("good", [1, 2], [3, 4], [4, 6]),
                                      add_test("wrong", [1, 2], [3, 4], [4, 7]),
                                      add_test("invalid", [1, 2], [3, 4], [4, 6], expect_failure=True)])
    good, wrong, invalid = vectors.load_file(path)
    devices = get_devices()
    assert run_test(good, devices).status == "pass"
    result = run_test(wrong, devices)
    assert result.status == "fail" and "expected 7, got 6" in result.message
    assert run_test(invalid, devices).status == "fail"  # it succeeded although it should not
    assert run_test(good, devices, dynamic_outputs=True).status == "pass"
    for mode in ("async", "burst", "fenced"):
        assert run_test(good, devices, mode).status == "pass"


def test_dynamic_output_rebuild_leaves_dimensions_unknown(tmp_path):
    (test,) = vectors.load_file(write(tmp_path / "a.json", [add_test("good", [1, 2], [3, 4], [4, 6])]))
    model = build_model(test.model, dynamic_outputs=True)
    assert model.hal_model.main.operands[3].dimensions == (0,)


# -- tolerances --------------------------------------------------------------------------------

def test_float32_tolerance_boundary():
    expected = np.array([1000.0], np.float32)
    tol = 1e-5 + 5 * 2 ** -23 * 1000.0
    assert compare(expected, expected + np.float32(tol * 0.9), T.TENSOR_FLOAT32).ok
    result = compare(expected, expected + np.float32(tol * 1.5), T.TENSOR_FLOAT32)
    assert not result.ok and result.worst_index == (0,) and result.excess > 0


def test_relaxed_uses_float16_rules_and_quant8_mobilenet_exception():
    assert not compare(np.array([1.0]), np.array([1.001]), T.TENSOR_FLOAT32).ok
    assert compare(np.array([1.0]), np.array([1.001]), T.TENSOR_FLOAT32, float16_rules=True).ok
    assert not compare(np.array([10], np.uint8), np.array([12], np.uint8), T.TENSOR_QUANT8_ASYMM).ok
    assert compare(np.array([10], np.uint8), np.array([12], np.uint8), T.TENSOR_QUANT8_ASYMM, mobilenet=True).ok
    assert not compare(np.array([True]), np.array([False]), T.TENSOR_BOOL8).ok


def test_nan_and_infinity_must_match():
    assert compare(np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), T.TENSOR_FLOAT32).ok
    assert not compare(np.array([np.nan]), np.array([0.0]), T.TENSOR_FLOAT32).ok
    assert not compare(np.array([np.inf]), np.array([1e30]), T.TENSOR_FLOAT32).ok


def test_worst_element_is_reported():
    result = compare(np.zeros((2, 3)), np.array([[0, 0, 0], [0, 0.5, 0.1]]), T.TENSOR_FLOAT32)
    assert result.worst_index == (1, 1) and result.actual == 0.5 and "2 of 6 elements" in result.message


def test_multinomial_frequencies():
    logits = np.log(np.array([[0.25, 0.75]]))
    samples = np.array([[0] * 25 + [1] * 75])
    assert compare_multinomial(logits, samples, 0.02).ok
    assert not compare_multinomial(logits, np.array([[0] * 50 + [1] * 50]), 0.02).ok


# -- the CLI -----------------------------------------------------------------------------------

def test_vectors_run_reports_json_junit_and_exit_code(tmp_path, capsys):
    folder = tmp_path / "vectors"
    folder.mkdir()
    write(folder / "a.json", [add_test("good", [1, 2], [3, 4], [4, 6]), add_test("wrong", [1, 2], [3, 4], [0, 0])])
    out_json, out_xml = tmp_path / "r.json", tmp_path / "r.xml"
    status = cli.main(["vectors", "run", str(folder), "-j", "1", "--json", str(out_json), "--junitxml", str(out_xml)])
    assert status == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("1 passed, 1 failed, 0 skipped")
    report = json.loads(out_json.read_text())
    assert (report["passed"], report["failed"], report["skipped"], report["errors"]) == (1, 1, 0, 0)
    assert {r["name"]: r["status"] for r in report["results"]} == {"good": "passed", "wrong": "failed"}
    suite = ET.parse(out_xml).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert cli.main(["vectors", "run", str(folder), "-j", "1", "--filter", "^good$"]) == 0


def test_expected_failures_are_xfailed_and_flagged_when_they_pass(tmp_path, capsys):
    """As ``nnts test`` has them: a listed failure is xfailed, a listed test that passes xpassed and
    warned about; neither fails the run; both counted in the summary line, the JSON and JUnit."""
    path = write(tmp_path / "a.json", [add_test("wrong", [1, 2], [3, 4], [0, 0]),
                                       add_test("good", [1, 2], [3, 4], [4, 6])])
    known = tmp_path / "known.txt"
    known.write_text("wrong  # a deliberate bug\ngood\n")
    out, xml = tmp_path / "r.json", tmp_path / "r.xml"
    assert cli.main(["vectors", "run", str(path), "-j", "1", "--expected-failures", str(known), "--json", str(out),
                     "--junitxml", str(xml)]) == 0
    printed = capsys.readouterr()
    assert "0 passed, 0 failed, 0 skipped, 1 xfailed, 1 xpassed" in printed.out
    assert f"WARNING: good is listed in {known} but passes now" in printed.err
    report = json.loads(out.read_text())
    assert (report["xfailed"], report["xpassed"], report["passed"], report["skipped"]) == (1, 1, 0, 0)
    rows = {r["name"]: r for r in report["results"]}
    assert rows["wrong"]["status"] == "xfailed" and "a deliberate bug" in rows["wrong"]["message"]
    assert rows["good"]["status"] == "xpassed"
    suite = ET.parse(xml).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "0", "1")


def test_expected_failures_take_globs_name_stale_entries_and_can_be_strict(tmp_path, capsys):
    path = write(tmp_path / "a.json", [add_test("wrong_1", [1, 2], [3, 4], [0, 0]),
                                       add_test("wrong_2", [1, 2], [3, 4], [0, 0]),
                                       add_test("good", [1, 2], [3, 4], [4, 6])])
    known = tmp_path / "known.txt"
    known.write_text("wrong_*  # a deliberate bug\nrenamed_long_ago  # gone\n")
    out = tmp_path / "r.json"
    assert cli.main(["vectors", "run", str(path), "-j", "1", "--expected-failures", str(known), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["xfailed"], report["passed"]) == (2, 1)
    assert f"{known}:2: renamed_long_ago  # gone" in capsys.readouterr().err
    known.write_text("wrong_*  # a deliberate bug\ngood  # fixed since\n")
    assert cli.main(["vectors", "run", str(path), "-j", "1", "--expected-failures", str(known), "--json", str(out),
                     "--strict-expected-failures"]) == 1
    rows = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["good"]["status"] == "failed" and "--strict-expected-failures" in rows["good"]["message"]


def test_unsupported_operations_are_skipped(tmp_path):
    from nnapi_ref.drivers.variants import SubsetDevice
    from nnapi_ref.runtime import using_drivers
    from nnapi_ref.types import OperationCode
    (test,) = vectors.load_file(write(tmp_path / "a.json", [add_test("add", [1, 2], [3, 4], [4, 6])]))
    with using_drivers([SubsetDevice("mul-only", [OperationCode.MUL])]) as devices:
        result = run_test(test, devices)
    assert result.status == "skip" and "ADD" in result.message


def test_devices_and_ops_commands(capsys):
    assert cli.main(["devices"]) == 0
    assert "nnapi-reference: type CPU" in capsys.readouterr().out
    assert cli.main(["ops"]) == 0
    assert "ADD" in capsys.readouterr().out


def test_an_in_process_command_leaves_the_callers_drivers_in_place():
    """``nnts devices --driver X`` run in process (as tests do) sets the runtime's drivers to X
    while it runs, and the caller's afterwards (a crashing driver left behind once broke the
    next test on the same worker)."""
    before = [d.name for d in get_devices()]
    assert cli.main(["devices", "--driver", "nnapi_ref.drivers.variants:TokenCachingDevice"]) == 0
    assert [d.name for d in get_devices()] == before


def test_missing_path_is_an_error(tmp_path):
    assert cli.main(["vectors", "run", str(tmp_path / "nope")]) == 2


def quant8_add_test():
    test = add_test("q", [130, 140], [128, 100], [0, 0])
    for k, dims in ((0, [2]), (1, [2]), (3, [2])):
        test["main"]["operands"][k].update(type="TENSOR_QUANT8_ASYMM", scale=0.5, zero_point=128)
    # a = [1, 6], b = [0, -14] -> sum [1, -8] -> quantized at scale 0.5, zero point 128: [130, 112]
    test["main"]["operands"][3]["data"] = [130, 112]
    return test


def test_signed_twin_shifts_zero_points_and_values(tmp_path):
    (test,) = vectors.load_file(write(tmp_path / "q.json", [quant8_add_test()]))
    twin = vectors.signed_twin(test)
    operands = twin.model.main.operands
    assert operands[0].type == T.TENSOR_QUANT8_ASYMM_SIGNED and operands[0].zero_point == 0
    assert twin.inputs[0].tolist() == [2, 12] and twin.expected[0].tolist() == [2, -16]
    assert twin.min_feature_level == 30
    devices = get_devices()
    assert run_test(test, devices).status == "pass" and run_test(twin, devices).status == "pass"
    (floats,) = vectors.load_file(write(tmp_path / "f.json", [add_test("f", [1, 2], [3, 4], [4, 6])]))
    assert vectors.signed_twin(floats) is None


def test_device_memory_and_cached_compilation_variants(tmp_path):
    (test,) = vectors.load_file(write(tmp_path / "q.json", [quant8_add_test()]))
    devices = get_devices()
    assert run_test(test, devices, device_memory=True).status == "pass"
    cache = tmp_path / "cache"
    assert run_test(test, devices, cache_dir=str(cache)).status == "pass"
    assert len(list(cache.iterdir())) == 2  # the model and data cache files were written
