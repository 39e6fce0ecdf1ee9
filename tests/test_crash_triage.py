"""Crashes a driver team can debug, through the ``nnts`` command in an empty folder: a driver
whose MUL kernel aborts the process, in process under pytest-xdist, isolated (``--isolate``) and
replayed (``nnts vectors run``, contained and ``--inline``). Each time the report and the console
name where the driver died (faulthandler's dump, the driver's own last stderr lines) and how to
replay it; ``-x`` stops at the first crash."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

NNTS = str(Path(sys.executable).parent / "nnts")
ROOT = Path(__file__).resolve().parents[1]
CRASHING_DRIVER = '''
import os
import sys

from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.types import OperationCode


class CrashingNpu(ReferenceDevice):
    def prepare_model(self, model, *args):
        if any(op.type == OperationCode.MUL for op in model.main.operations):
            mul_kernel_fault()
        return super().prepare_model(model, *args)


def mul_kernel_fault():
    print("acme: MUL kernel: null tensor pointer", file=sys.stderr, flush=True)
    os.abort()


def make():
    return CrashingNpu(name="acme-npu")
'''
SELECTION = ("-p", "no:randomly", "--no-shared-vectors", "-k", "test_generated and MUL and FLOAT32", "--variants",
             "sync", "--driver", "acme_crash:make", "cts")
WHERE_IT_DIED = 'acme_crash.py", line 12 in prepare_model'


@pytest.fixture
def team(tmp_path):
    (tmp_path / "acme_crash.py").write_text(CRASHING_DRIVER)
    return tmp_path


def nnts(folder, *args, stdin=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_"))}
    done = subprocess.run(args if args[0] != "nnts" else [NNTS, *args[1:]], check=False, cwd=folder,
                          capture_output=True, text=True, timeout=600, env=dict(env, PYTHONDONTWRITEBYTECODE="1"),
                          input=stdin)
    return done.returncode, done.stdout + done.stderr


def test_an_in_process_crash_under_xdist_stops_x_and_says_where_and_how_to_replay(team):
    code, out = nnts(team, "nnts", "test", "-n", "2", "-x", *SELECTION)
    assert code in (1, 2) and "stopping after" in out, out[-3000:]  # (xdist ends -x as interrupted: 2)
    crashed = re.findall(r"^CRASH (\S+)", out, re.MULTILINE)
    assert 1 <= len(crashed) <= 2, out[-3000:]  # the first crash of each worker, not one per MUL model
    assert "Fatal Python error: Aborted" in out and WHERE_IT_DIED in out, out[-3000:]
    replay = re.search(r"^replay: (nnts vectors run .*--inline)$", out, re.MULTILINE)
    assert replay and "reproducer: " in out, out[-3000:]
    code, again = nnts(team, *shlex.split(replay.group(1).replace("--inline", "")))  # the replay line crashes again
    assert code == 1 and "1 crashed" in again and WHERE_IT_DIED in again, again[-3000:]


RANDOM_MUL = ("-p", "no:randomly", "--random-seed", "17", "--random-ops", "1", "-k", "test_random_operation",
              "--driver", "acme_crash:make", "cts")


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_random_test_crashing_an_in_process_driver_leaves_its_model_and_the_drivers_stderr(team, workers):
    """The model a random test drew is saved before the driver runs it: a crash that ends the
    process (pytest, or an xdist worker) leaves a reproducer that replays it, and the driver's own
    stderr lines in the test are in the console (and, under xdist, in the report)."""
    report = team / "out" / "r.json"
    code, out = nnts(team, "nnts", "test", *workers, *RANDOM_MUL, *(("--report", str(report)) if workers else ()))
    assert code != 0 and re.search(r"^CRASH cts/test_random_operation.py::test_random_operation\[MUL-seed17\]",
                                   out, re.MULTILINE), out[-3000:]
    stderr = "the driver's last stderr lines (in this test):\n    acme: MUL kernel: null tensor pointer"
    assert stderr in out, out[-3000:]
    if workers:
        messages = [t["message"] or "" for t in json.loads(report.read_text())["tests"]]
        assert any(stderr in m for m in messages), messages
    replay = re.search(r"^replay: (nnts vectors run \S+crashed_random_operation_seed17.json .*) --inline$", out,
                       re.MULTILINE)
    assert replay, out[-3000:]
    code, again = nnts(team, *shlex.split(replay.group(1)))
    assert code == 1 and "1 crashed" in again and "acme: MUL kernel: null tensor pointer" in again, again[-3000:]


def test_an_isolated_crash_reports_the_drivers_last_stderr_lines(team):
    code, out = nnts(team, "nnts", "test", "--isolate", "-x", *SELECTION)
    assert code == 1 and "killed by SIGABRT" in out, out[-3000:]
    assert "acme: MUL kernel: null tensor pointer" in out and WHERE_IT_DIED in out, out[-3000:]
    assert re.search(r"^replay: nnts vectors run ", out, re.MULTILINE), out[-3000:]


def test_a_replay_inline_runs_in_this_process_where_a_debugger_stops_in_the_driver(team):
    model = str(ROOT / "cts" / "corpus" / "arithmetic.json")
    only = ("--filter", "^nnts_mul_broadcast_float32$", "--driver", "acme_crash:make")
    code, out = nnts(team, "nnts", "vectors", "run", model, *only)  # contained: a row, the stack in it
    assert code == 1 and "1 crashed" in out and "acme: MUL kernel: null tensor pointer" in out, out[-3000:]
    assert WHERE_IT_DIED in out
    code, out = nnts(team, "nnts", "vectors", "run", model, *only, "--inline")  # this process dies
    assert code == -signal.SIGABRT and WHERE_IT_DIED in out, (code, out[-3000:])
    code, out = nnts(team, sys.executable, "-m", "pdb", "-m", "nnts", "vectors", "run", model, *only, "--inline",
                     stdin="break acme_crash.py:12\ncontinue\nwhere\nquit\n")
    assert "acme_crash.py(12)prepare_model()" in out, out[-3000:]


def test_a_crash_in_one_process_leaves_the_report_of_what_ran_and_the_crash(team):
    """``nnts test`` in one process, an in-process driver that aborts in its second test: the
    report asked for is still written, with the test that passed before the crash and the
    crashing one as CRASHED (the driver's stderr lines and the replay in it); the run fails."""
    report = team / "out" / "r.json"
    code, out = nnts(team, "nnts", "test", "-p", "no:randomly", "--no-shared-vectors", "-k",
                     "test_generated and (nnts_add_float32 or nnts_mul_broadcast_float32) and not RELAXED",
                     "--variants", "sync", "--driver", "acme_crash:make", "--report", str(report),
                     "--junitxml", "out/junit.xml", "cts")
    assert code != 0 and "conformance report written to" in out, out[-3000:]
    data = json.loads(report.read_text())
    crashed = "cts/test_generated.py::test_generated[MUL-TENSOR_FLOAT32-nnts_mul_broadcast_float32]"
    statuses = {t["test"]: t["status"] for t in data["tests"]}
    assert statuses.get("cts/test_generated.py::test_generated[ADD-TENSOR_FLOAT32-nnts_add_float32]") == "passed"
    assert statuses.get(crashed) == "crashed" and data["totals"]["crashed"] == 1, statuses
    assert data["totals"]["passed"] >= 1, data["totals"]
    record = next(t for t in data["tests"] if t["test"] == crashed)
    assert "acme: MUL kernel: null tensor pointer" in record["message"] and record["replay"], record
    assert WHERE_IT_DIED in record["message"], record  # faulthandler's stack, in the report as on the console
    junit = ET.parse(team / "out" / "junit.xml").getroot().find("testsuite")
    assert (junit.get("tests"), junit.get("failures")) == ("2", "1"), ET.tostring(junit)
    failure = junit.find("testcase[@name='test_generated[MUL-TENSOR_FLOAT32-nnts_mul_broadcast_float32]']/failure")
    assert failure is not None and "acme: MUL kernel" in failure.text, ET.tostring(junit)


KILLED_AFTER_ADD = '''
import os
import signal


def pytest_runtest_logfinish(nodeid, location):
    if "nnts_add_float32" in nodeid:
        os.kill(os.getpid(), signal.SIGKILL)
'''


def test_pytest_killed_between_tests_still_leaves_the_report_of_what_ran(team):
    """pytest killed after one test ended and before the next began (here by a plugin of the
    team's, as the OOM killer or a CI timeout would): the run fails with a line that says so, and
    the report asked for holds the test that ran, with nothing marked crashed."""
    (team / "acme_killer.py").write_text(KILLED_AFTER_ADD)
    report = team / "out" / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_"))}
    done = subprocess.run(
        [NNTS, "test", "-p", "acme_killer", "-p", "no:randomly", "--no-shared-vectors", "-k",
         "test_generated and (nnts_add_float32 or nnts_mul_broadcast_float32) and not RELAXED", "--variants", "sync",
         "--driver", "acme_crash:make", "--report", str(report), "cts"],
        check=False, cwd=team, capture_output=True, text=True, timeout=600,
        env=dict(env, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(team)))
    out = done.stdout + done.stderr
    assert done.returncode == 128 + signal.SIGKILL, out[-3000:]  # as a shell reports a process killed
    assert "nnts: pytest was killed by SIGKILL, in no test" in out, out[-3000:]
    data = json.loads(report.read_text())
    statuses = {t["test"]: t["status"] for t in data["tests"]}
    ran = "cts/test_generated.py::test_generated[ADD-TENSOR_FLOAT32-nnts_add_float32]"
    assert statuses == {ran: "passed"}, statuses
    assert data["totals"].get("crashed", 0) == 0, data["totals"]
