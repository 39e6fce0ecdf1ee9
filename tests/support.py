"""What the project's tests share: the suite run against a driver in a subprocess, and the
partitioning check of the drivers backed by other runtimes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from nnapi_ref import Compilation, Execution, Model, OperandType, hal, using_drivers
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.types import OperandCode as T, OperationCode as Op

ROOT = Path(__file__).resolve().parents[1]


def run_suite(driver: str, paths, selection: str, *options: str) -> tuple[int, str, list[str]]:
    """``pytest paths -k selection`` against ``driver`` in a subprocess, without the shared vectors
    and without plugins that reorder, cache or distribute; return (exit code, output, the node ids
    of the failed tests)."""
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               "-p", "no:xdist", "--no-shared-vectors", "--driver", driver, "-k", selection, "-rf", *options]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    return done.returncode, output, re.findall(r"^FAILED (\S+)", output, re.M)


def check_partitioning_with_the_reference(adapter: hal.Device) -> None:
    """ADD -> CHANNEL_SHUFFLE (mapped by no adapter) -> MUL: the adds and the multiplication on
    ``adapter``, the shuffle on the reference, the result as numpy computes it."""
    adapter.capabilities = hal.Capabilities(  # faster than the CPU whatever this machine measures now
        operand_performance=[(T.TENSOR_FLOAT32, hal.PerformanceInfo(0.5, 0.5))])
    model = Model()
    f32 = OperandType(T.TENSOR_FLOAT32, (1, 2, 4))
    a, b, t, u, out = (model.add_operand(f32) for _ in range(5))
    none, groups, axis = (model.add_operand(OperandType(T.INT32, ())) for _ in range(3))
    model.set_operand_value(none, np.int32(0))
    model.set_operand_value(groups, np.int32(2))
    model.set_operand_value(axis, np.int32(-1))
    model.add_operation(Op.ADD, [a, b, none], [t])
    model.add_operation(Op.CHANNEL_SHUFFLE, [t, groups, axis], [u])
    model.add_operation(Op.MUL, [u, b, none], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    av = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    bv = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 2, 4)
    with using_drivers([ReferenceDevice(), adapter]):
        compilation = Compilation(model, None)
        compilation.finish()
        name = adapter.get_name()
        assert [s.device.name for s in compilation.plan.steps] == [name, "nnapi-reference", name]
        execution = Execution(compilation)
        execution.set_input(0, av)
        execution.set_input(1, bv)
        result = np.zeros((1, 2, 4), np.float32)
        execution.set_output(0, result)
        execution.compute()
    shuffled = (av + bv).reshape(1, 2, 2, 2).transpose(0, 1, 3, 2).reshape(1, 2, 4)  # 2 groups of 2 channels
    np.testing.assert_allclose(result, shuffled * bv, rtol=1e-6)


def report_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """Test id -> (passed | failed | skipped, message) from a ``--report`` JSON file: a generated
    test's variants each by their own id (``...[MODEL-sync]``), as JUnit XML cannot say them."""
    import json
    outcome = {"passed": "passed", "unsupported": "skipped", "skipped": "skipped", "xfailed": "skipped"}
    return {t["id"]: (outcome.get(t["status"], "failed"), t["message"] or "")
            for t in json.loads(Path(path).read_text())["tests"]}
