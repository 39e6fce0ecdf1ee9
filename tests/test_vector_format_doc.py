"""docs/test-vectors.md against the code that reads and writes the format: its example files and
its inline example pass on the reference (the expected values in them were computed by hand), it
names every field, operand type and lifetime nnts writes, and a file of an unknown format version
is refused with an error naming the version."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import vectors
from nnapi_ref.runtime import get_devices
from nnapi_ref.types import Lifetime, OperandCode, type_name
from nnts.runners.model_runner import MODES, run_test

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "test-vectors.md"
EXAMPLE = ROOT / "docs" / "examples" / "add.json"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_example_file_passes_on_the_reference_in_every_mode():
    tests = vectors.load_file(EXAMPLE)
    assert [t.name for t in tests] == ["doc_add_float32_relu_broadcast", "doc_add_quant8_asymm",
                                       "doc_if_add_twice_or_add_100"]
    devices = get_devices()
    for test in tests:
        for mode in MODES:
            result = run_test(test, devices, mode)
            assert result.status == "pass", (test.name, mode, result.message)
    assert run_test(tests[0], devices, dynamic_outputs=True).status == "pass"


def test_nnts_vectors_run_accepts_the_example():
    done = subprocess.run([sys.executable, "-m", "nnts", "vectors", "run", str(EXAMPLE), "-j", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed, 0 failed, 0 skipped" in done.stdout


def test_the_example_if_takes_the_else_branch_and_a_wrong_value_fails():
    """The comparison is live: the condition false gives x + 100 (by hand: [101, 102.5])."""
    doc = json.loads(EXAMPLE.read_text())
    test = copy.deepcopy(doc["tests"][2])
    test["main"]["operands"][0]["data"] = [False]
    devices = get_devices()
    assert run_test(vectors.test_from_json(test), devices).status == "fail"
    test["main"]["operands"][4]["data"] = [101.0, 102.5]
    assert run_test(vectors.test_from_json(test), devices).status == "pass"


def test_the_inline_minimal_file_passes(tmp_path):
    blocks = re.findall(r"```json\n(.*?)```", _doc(), re.S)
    assert len(blocks) == 1
    path = tmp_path / "minimal.json"
    path.write_text(blocks[0])
    (test,) = vectors.load_file(path)
    assert run_test(test, get_devices()).status == "pass"
    assert test.expected[0].tolist() == [1.5, -1.0]


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_the_doc_names_every_field_type_and_lifetime_nnts_writes(tmp_path):
    written = tmp_path / "written.json"
    vectors.write_file(written, vectors.load_file(EXAMPLE))
    doc = _doc()
    fields = _keys(json.loads(written.read_text()))
    assert {"format", "tests", "main", "referenced", "channel_quant", "is_ignored"} <= fields
    for name in sorted(fields):
        assert f"`{name}`" in doc, f"docs/test-vectors.md does not describe the field {name!r}"
    for code in OperandCode:
        assert f"`{type_name(code)}`" in doc, type_name(code)
    for life in Lifetime:
        if life != Lifetime.POINTER:  # a runtime-only lifetime, never in a model
            assert f"`{life.name}`" in doc, life.name
    assert f"`{vectors.FORMAT}`" in doc


def test_what_nnts_writes_reads_back_the_same(tmp_path):
    original = vectors.load_file(EXAMPLE)
    written = tmp_path / "written.json"
    vectors.write_file(written, original)
    for a, b in zip(original, vectors.load_file(written)):
        assert vectors.test_to_json(a) == vectors.test_to_json(b)
        for x, y in zip(a.inputs + a.expected, b.inputs + b.expected):
            assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("content, message", [
    ({"format": "nnapi-test-vector/3", "tests": []},
     "test-vector format version 'nnapi-test-vector/3' is not one this nnts reads (nnapi-test-vector/1, nnapi-test-vector/2)"),
    ({"format": "nnapi-test-vector/one", "tests": []}, "version 'nnapi-test-vector/one' is not one this nnts reads"),
    ({"tests": []}, 'not a test-vector file (no "format" field; expected "nnapi-test-vector/1")'),
    ({"format": "onnx", "tests": []}, "format 'onnx' is not a test-vector format"),
    ({"format": ["nnapi-test-vector/1"]}, "is not a test-vector format"),
    ([{"format": "nnapi-test-vector/1"}], "the top level is a JSON list"),
])
def test_unknown_formats_are_refused_by_name(tmp_path, content, message):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(content))
    with pytest.raises(vectors.FormatError) as e:
        vectors.load_file(path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_nnts_vectors_run_reports_an_unknown_version_in_one_line(tmp_path):
    path = tmp_path / "future.json"
    path.write_text(json.dumps({"format": "nnapi-test-vector/3", "tests": []}))
    done = subprocess.run([sys.executable, "-m", "nnts", "vectors", "run", str(path), "-j", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "nnapi-test-vector/3" in done.stdout and "Traceback" not in done.stdout + done.stderr
