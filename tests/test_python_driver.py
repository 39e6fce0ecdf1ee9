"""The example Python driver (examples/python_driver/toy_driver.py), held to CTS and VTS the way a
driver author would run them: ADD on TENSOR_FLOAT32 passes on every path (model and request
validation included), every other operation comes out skipped as unsupported, and a copy of the
driver with its validation taken out fails VTS (so the passes are the driver's doing)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op, PreferenceCode, PriorityCode

from . import support

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "python_driver"
DRIVER = "toy_driver:make_device"
SUPPORTED_ID = "ADD-TENSOR_FLOAT32"  # also matches ADD-TENSOR_FLOAT32_RELAXED
NO_DEVICE_MEMORY = "allocates no device memory"



def _load_example():
    """The example module, loaded from its file (it is a folder to copy, not a package)."""
    spec = importlib.util.spec_from_file_location("toy_driver", EXAMPLE / "toy_driver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


toy_driver = _load_example()


def _suite(tmp_path: Path, driver: str, *args: str, pythonpath: list[Path] = (),
           workers: tuple[str, ...] = ("-n", "2")) -> tuple[int, str, dict]:
    """``pytest ARGS`` with the example on PYTHONPATH, as the example's README runs it (under xdist;
    workers=() for one process where xdist is not what a test checks): the exit code, the output,
    and test id -> (passed | failed | skipped, message)."""
    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(str(p) for p in [*pythonpath, EXAMPLE]))
    env.pop("NNTS_DRIVER", None)
    command = [sys.executable, "-m", "pytest", *args, "-q", *workers, "-p", "no:cacheprovider",
               "--no-shared-vectors", "--reproducers", str(tmp_path / "reproducers"), "--driver", driver,
               "--report", str(report)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr, support.report_outcomes(report)


def test_cts_and_vts_pass_on_add_float32(tmp_path):
    code, output, outcomes = _suite(tmp_path, DRIVER, "cts", "vts", "-m", "op_ADD")
    assert code == 0, output[-4000:]
    failed = [n for n, (outcome, _) in outcomes.items() if outcome == "failed"]
    assert not failed, failed
    supported = {n: o for n, o in outcomes.items() if SUPPORTED_ID in n}
    others = {n: o for n, o in outcomes.items() if n not in supported}
    # ADD on float32 runs and passes, except device memory, which the driver declines.
    skipped = [n for n, (outcome, why) in supported.items() if outcome == "skipped" and NO_DEVICE_MEMORY not in why]
    assert not skipped, skipped
    passed = [n for n, (outcome, _) in supported.items() if outcome == "passed"]
    for kind in ("cts/test_generated", "vts/test_generated", "vts/test_validate_model", "vts/test_validate_request"):
        assert any(n.startswith(kind + ".py::") for n in passed), f"no {kind} test passed"
    for mode in ("sync", "async", "burst", "fenced", "dynamic", "cached"):
        assert any(n.endswith(f"-{mode}]") and n.startswith("cts/") for n in passed), f"no CTS {mode} test passed"
    assert any("RELAXED" in n for n in passed), "no relaxed float32 ADD passed"
    assert len([n for n in passed if "test_validate_model" in n]) >= 30, passed
    # The models that must fail (a bad fused activation, shapes that do not broadcast) failed.
    assert any("bad_activation" in n for n in passed) and any("bad_broadcast" in n for n in passed)
    # ADD on other types, and models mixing ADD with other operations: skipped as unsupported.
    not_unsupported = [n for n, (outcome, why) in others.items() if outcome != "skipped" or "unsupported" not in why]
    assert not not_unsupported, not_unsupported
    assert any("QUANT8" in n for n in others) and any("FLOAT16" in n for n in others)


def test_device_level_vts_passes(tmp_path):
    """Capabilities, name, type, feature level, cache files, extensions; deadlines and priorities."""
    code, output, outcomes = _suite(tmp_path, DRIVER, "vts/test_basic.py", "vts/test_qos.py", workers=())
    assert code == 0, output[-4000:]
    assert not [n for n, (outcome, _) in outcomes.items() if outcome == "failed"]
    passed = {n for n, (outcome, _) in outcomes.items() if outcome == "passed"}
    assert {"vts/test_basic.py::test_capabilities", "vts/test_basic.py::test_feature_level"} <= passed, passed
    assert any(n.startswith("vts/test_qos.py::test_prepare_with_deadline") for n in passed), passed
    assert any(n.startswith("vts/test_qos.py::test_execute_with_deadline") for n in passed), passed


def test_other_operations_are_skipped_as_unsupported(tmp_path):
    code, output, outcomes = _suite(tmp_path, DRIVER, "cts", "vts", "-m",
                                    "(op_MUL or op_SUB) and dtype_TENSOR_FLOAT32")
    assert code == 0, output[-4000:]
    assert len(outcomes) > 20
    not_unsupported = {n: o for n, o in outcomes.items() if o[0] != "skipped" or "unsupported" not in o[1]}
    assert not not_unsupported, not_unsupported
    said = [line for line in output.splitlines() if "tests skipped as unsupported" in line]  # one line
    assert len(said) == 1 and "2 operations it ran in no test" in said[0], output[-2000:]


LAX_DRIVER = '''
import toy_driver

def make_device():
    """The example with its model and request validation taken out."""
    toy_driver.validate_for_driver = lambda model: 0
    toy_driver.ToyPreparedModel._check_request = lambda self, request: None
    return toy_driver.ToyDevice()
'''


def test_without_its_validation_the_driver_fails_vts(tmp_path):
    (tmp_path / "lax_driver.py").write_text(LAX_DRIVER)
    code, output, outcomes = _suite(tmp_path, "lax_driver:make_device", "vts/test_validate_model.py",
                                    "vts/test_validate_request.py", "-m", "op_ADD and dtype_TENSOR_FLOAT32",
                                    pythonpath=[tmp_path], workers=())
    assert code != 0
    failed = [n for n, (outcome, _) in outcomes.items() if outcome == "failed"]
    assert any("test_validate_model" in n for n in failed) and any("test_validate_request" in n for n in failed), \
        output[-3000:]


# ---- the driver called directly ------------------------------------------------------------------

def _tensor(lifetime, dims=(2,)):
    return hal.Operand(T.TENSOR_FLOAT32, dims, lifetime=lifetime)


def _model(second=Op.ADD, fuse_code=0) -> hal.Model:
    """in0 + in1 -> t; t (ADD or MUL) in1 -> out."""
    fuse = hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(fuse_code, np.int32))
    operands = [_tensor(Lifetime.SUBGRAPH_INPUT), _tensor(Lifetime.SUBGRAPH_INPUT), fuse,
                _tensor(Lifetime.TEMPORARY_VARIABLE), _tensor(Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(Op.ADD, (0, 1, 2), (3,)), hal.Operation(second, (3, 1, 2), (4,))]
    return hal.Model(hal.Subgraph(operands, operations, (0, 1), (4,)))


def _request(inputs: list[np.ndarray], output_bytes: int) -> tuple[hal.Request, np.ndarray]:
    data = np.concatenate([a.view(np.uint8) for a in inputs] + [np.zeros(output_bytes, np.uint8)])
    args, offset = [], 0
    for a in inputs:
        args.append(hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, offset, a.nbytes))
        offset += a.nbytes
    out = hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, offset, output_bytes)
    return hal.Request(args, [out], [hal.SharedMemory(data)]), data[offset:]


def _prepare(device, model):
    return device.prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, (), (), None)


def test_supported_operations_are_add_on_float32_only():
    device = toy_driver.make_device()
    assert device.get_supported_operations(_model(Op.ADD)) == [True, True]
    assert device.get_supported_operations(_model(Op.MUL)) == [True, False]
    with pytest.raises(HalError) as e:
        _prepare(device, _model(Op.MUL))
    assert e.value.status == ErrorStatus.GENERAL_FAILURE
    broken = _model()
    broken.main.operations[0] = hal.Operation(Op.ADD, (0, 1, 2, 2), (3,))  # no such ADD signature
    with pytest.raises(HalError) as e:
        device.get_supported_operations(broken)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_two_adds_with_relu6():
    """(a + b) + b clamped to [0, 6] by RELU6 at each step, computed by hand."""
    prepared = _prepare(toy_driver.make_device(), _model(fuse_code=3))
    a, b = np.array([1.5, -4.0], np.float32), np.array([2.0, 1.0], np.float32)
    request, out = _request([a, b], 8)
    result = prepared.execute_synchronously(request, True, None, 0)
    assert out.view(np.float32).tolist() == [5.5, 1.0]  # relu6(relu6(3.5) + 2), relu6(relu6(-3) + 1)
    assert result.output_shapes == [hal.OutputShape((2,), True)]
    assert result.timing.time_on_device_ns >= 0
    short, _ = _request([a, b], 4)
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(short, False, None, 0)
    assert e.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert e.value.output_shapes == [hal.OutputShape((2,), False)]


def test_shapes_known_only_at_execution_are_checked_then():
    """An input of unknown shape in the model gets its shape from the request: one that does not
    broadcast fails the execution with INVALID_ARGUMENT, one that does is computed."""
    model = _model(fuse_code=0)
    model.main.operands[0] = _tensor(Lifetime.SUBGRAPH_INPUT, dims=(0,))
    for k in (3, 4):
        model.main.operands[k] = _tensor(model.main.operands[k].lifetime, dims=(0,))
    prepared = _prepare(toy_driver.make_device(), model)
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, 0.25], np.float32)
    request, _ = _request([a, b], 12)
    request.inputs[0].dimensions = (3,)
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(request, False, None, 0)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "do not broadcast" in e.value.message
    request, out = _request([a[:1], b], 8)
    request.inputs[0].dimensions = (1,)
    result = prepared.execute_synchronously(request, False, None, 0)
    assert out.view(np.float32).tolist() == [2.0, 1.5] and result.output_shapes == [hal.OutputShape((2,), True)]
