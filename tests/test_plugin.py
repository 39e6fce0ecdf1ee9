"""The pytest plugin (nnts/plugin.py) as a driver author uses it: unsupported operations counted per
operation, expected failures reported as xfail and flagged when they pass, the HTML report
written under pytest-xdist, and markers per operation."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTION = "nnts_add_quant8_relu or nnts_mul_broadcast_float32"


def pytest_run(tmp_path, *args, pythonpath=None):
    command = [sys.executable, "-m", "pytest", "cts/test_generated.py", "-q", "-p", "no:cacheprovider",
               "--no-shared-vectors", "--reproducers", str(tmp_path / "reproducers"), *args]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr


def test_unsupported_operations_are_counted_per_operation_not_passed(tmp_path):
    # A driver supporting only MUL: the ADD models are skipped as unsupported.
    (tmp_path / "only_mul.py").write_text("from nnapi_ref.drivers.variants import SubsetDevice\n"
                                          "from nnapi_ref.types import OperationCode\n"
                                          "def make():\n    return SubsetDevice('mul-only', [OperationCode.MUL])\n")
    code, output = pytest_run(tmp_path, "--driver", "only_mul:make", "-k", SELECTION, "-rs", pythonpath=tmp_path)
    assert code == 0, output[-2000:]
    assert re.search(r"nnts: \d+ tests skipped as unsupported: 1 operation it ran in no test", output), output[-2000:]
    assert "unsupported: ADD on TENSOR_" in output
    assert re.search(r"\d+ passed", output)  # the MUL model runs


def test_expected_failures_are_xfail_and_flagged_when_they_pass(tmp_path):
    listed = tmp_path / "expected.txt"
    listed.write_text("nnts_add_quant8_relu  # a known issue of the driver under test\n")
    code, output = pytest_run(tmp_path, "--driver", "nnapi_ref.drivers.broken:wrong_add_quant8",
                              "--expected-failures", str(listed), "-k", "nnts_add_quant8_relu", "--variants", "sync")
    assert code == 0 and re.search(r"\d+ xfailed", output), output[-2000:]
    code, output = pytest_run(tmp_path, "--driver", "reference", "--expected-failures", str(listed),
                              "-k", "nnts_add_quant8_relu", "--variants", "sync")
    assert "expected failures that now pass" in output and "nnts_add_quant8_relu" in output, output[-2000:]


def test_report_is_written_under_xdist_with_results_of_every_worker(tmp_path):
    report = tmp_path / "conformance.html"
    code, output = pytest_run(tmp_path, "-n", "2", "--report", str(report), "-k", SELECTION)
    assert code == 0, output[-2000:]
    passed = int(re.search(r"(\d+) passed", output).group(1))
    page = report.read_text()
    assert f'<span id="pytest-summary">{passed} passed</span>' in page and ">ADD<" in page and ">MUL<" in page


def test_markers_select_an_operation(tmp_path):
    code, output = pytest_run(tmp_path, "-m", "op_MUL", "-k", SELECTION, "--collect-only")
    ids = re.findall(r"test_generated\[([^\]]+)\]", output)
    assert ids and all(i.startswith("MUL-") for i in ids), output[-2000:]
