"""The suite catches broken drivers: each driver of :mod:`nnapi_ref.drivers.broken` has one fault,
and the suite run against it (``pytest cts --driver nnapi_ref.drivers.broken:<name>``, in a
subprocess) must fail, naming the fault; the same selection passes with the reference driver.

Test models: a few hand-computed test-vector files written here (names ``nntsbroken_*``), and
parts of the project corpus ``cts/corpus``. What the suite cannot catch is asserted too, so a
change in that is noticed: an error of one LSB in a quant8 output is within NNAPI's tolerance.

``accepts_invalid_model`` cannot show through CTS (the runtime validates every model before a
driver sees it), so it is checked straight through the driver interface: by invalid models made
here, and by VTS's model-validation tests (``vts/test_validate_model.py``) when the reference
driver passes the selection used.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import hal, vectors
from nnapi_ref.drivers import broken
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.hal import ErrorStatus, HalError, Model, Operand, Operation, Subgraph
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op, PreferenceCode, PriorityCode
from nnts.runners.drivers import load_driver

from . import support

ROOT = support.ROOT
IN, OUT, TMP, CONST = Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT, Lifetime.TEMPORARY_VARIABLE, \
    Lifetime.CONSTANT_COPY


def opnd(code, dims=(), scale=0.0, zp=0, lifetime=IN, value=None) -> Operand:
    if value is not None:
        value = np.asarray(value, {T.INT32: np.int32, T.TENSOR_FLOAT32: np.float32, T.BOOL: np.bool_,
                                   T.TENSOR_QUANT8_ASYMM: np.uint8}[code]).reshape(-1)
    return Operand(code, tuple(dims), scale, zp, lifetime, value)


def vector(name, operands, operations, inputs, outputs, feed, expected, relaxed=False) -> vectors.TestModel:
    sg = Subgraph(operands, [Operation(c, tuple(i), tuple(o)) for c, i, o in operations], tuple(inputs),
                  tuple(outputs))
    dtypes = [np.dtype(vectors.DTYPES[operands[k].type]) for k in outputs]
    return vectors.TestModel(name, Model(sg, [], relaxed),
                             [np.asarray(v, vectors.DTYPES[operands[k].type]) for k, v in zip(inputs, feed)],
                             [np.asarray(e, d).reshape(-1) for e, d in zip(expected, dtypes)], [False] * len(outputs),
                             min_feature_level=27, source="tests/test_broken_drivers.py",
                             output_dims=[operands[k].dimensions for k in outputs])


def selftest_vectors() -> list[vectors.TestModel]:
    tests = []
    # ADD, quant8 (scale 0.5, zero point 10 everywhere): out = a + b - 10.
    q = dict(scale=0.5, zp=10)
    a, b = [10, 20, 30, 40, 50, 60], [12, 14, 16, 18, 20, 22]
    tests.append(vector("nntsbroken_add_quant8",
                        [opnd(T.TENSOR_QUANT8_ASYMM, [6], **q), opnd(T.TENSOR_QUANT8_ASYMM, [6], **q),
                         opnd(T.INT32, lifetime=CONST, value=0), opnd(T.TENSOR_QUANT8_ASYMM, [6], lifetime=OUT, **q)],
                        [(Op.ADD, [0, 1, 2], [3])], [0, 1], [3], [a, b], [[x + y - 10 for x, y in zip(a, b)]]))
    # ADD, float32, values float16 can't hold: expected from numpy's float32 addition.
    fa = np.array([0.1, 1.2345678, -3.3333333, 7.0001], np.float32)
    fb = np.array([0.2, 2.7182817, 1.4142135, 0.0003], np.float32)
    for relaxed in (False, True):
        tests.append(vector("nntsbroken_add_float32" + ("_relaxed" if relaxed else ""),
                            [opnd(T.TENSOR_FLOAT32, [4]), opnd(T.TENSOR_FLOAT32, [4]),
                             opnd(T.INT32, lifetime=CONST, value=0), opnd(T.TENSOR_FLOAT32, [4], lifetime=OUT)],
                            [(Op.ADD, [0, 1, 2], [3])], [0, 1], [3], [fa, fb], [fa + fb], relaxed=relaxed))
    # AVERAGE_POOL_2D, quant8 (scale 1), 2x2 VALID window over a 1x2x2x2 NHWC input:
    # channel 0 averages (1 + 2 + 2 + 2) / 4 = 1.75 -> 2, channel 1 (4 + 4 + 4 + 5) / 4 = 4.25 -> 4.
    pool_in = [1, 4, 2, 4, 2, 4, 2, 5]
    pool_params = [opnd(T.INT32, lifetime=CONST, value=v) for v in (2, 1, 1, 2, 2, 0)]  # VALID, strides, 2x2, NONE
    u8 = dict(scale=1.0, zp=0)
    tests.append(vector("nntsbroken_avgpool_quant8",
                        [opnd(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 2], **u8)] + pool_params +
                        [opnd(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 2], lifetime=OUT, **u8)],
                        [(Op.AVERAGE_POOL_2D, range(7), [7])], [0], [7], [pool_in], [[2, 4]]))
    # The same pool, its result requantized to a 4x finer scale by ADD with zeros: 2 -> 8, 4 -> 16.
    tests.append(vector("nntsbroken_avgpool_quant8_amplified",
                        [opnd(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 2], **u8)] + pool_params +
                        [opnd(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 2], lifetime=TMP, **u8),
                         opnd(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 2], lifetime=CONST, value=[0, 0], **u8),
                         opnd(T.INT32, lifetime=CONST, value=0),
                         opnd(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 2], scale=0.25, zp=0, lifetime=OUT)],
                        [(Op.AVERAGE_POOL_2D, range(7), [7]), (Op.ADD, [7, 8, 9], [10])], [0], [10], [pool_in],
                        [[8, 16]]))
    # CONV_2D, float32, 1x1 filter 2 and bias 0.5 over a 1x2x2x1 input: out = 2 x + 0.5, shape [1, 2, 2, 1].
    tests.append(vector("nntsbroken_conv_float32_batch1",
                        [opnd(T.TENSOR_FLOAT32, [1, 2, 2, 1]),
                         opnd(T.TENSOR_FLOAT32, [1, 1, 1, 1], lifetime=CONST, value=[2.0]),
                         opnd(T.TENSOR_FLOAT32, [1], lifetime=CONST, value=[0.5])] +
                        [opnd(T.INT32, lifetime=CONST, value=v) for v in (2, 1, 1, 0)] +
                        [opnd(T.TENSOR_FLOAT32, [1, 2, 2, 1], lifetime=OUT)],
                        [(Op.CONV_2D, range(7), [7])], [0], [7], [[1, 2, 3, 4]], [[2.5, 4.5, 6.5, 8.5]]))
    return tests


@pytest.fixture(scope="module")
def vector_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("broken-driver-vectors")
    vectors.write_file(folder / "selftest.json", selftest_vectors(), source="tests/test_broken_drivers.py")
    return folder


def run_suite(driver: str, selection: str, vector_dir: Path, tmp: Path, paths=("cts/test_generated.py",),
              variants=("--variants", "sync")):
    """Run the suite over ``vector_dir`` in a subprocess (the synchronous variants, unless
    ``variants`` says otherwise); return (exit code, output, failed test names)."""
    code, output, failed = support.run_suite(driver, paths, selection, "--vectors", str(vector_dir),
                                             "--reproducers", str(tmp / "reproducers"), *variants)
    return code, output, [f.split("::", 1)[1] for f in failed]


SELECTION = "nntsbroken"


def test_reference_driver_passes_the_selection(vector_dir, tmp_path):
    """The control: everything the broken drivers fail passes with the reference driver."""
    code, output, failed = run_suite("reference", f"{SELECTION} or (CONV_2D and TENSOR_FLOAT32) or "
                                                  "(ADD and TENSOR_QUANT8_ASYMM)", vector_dir, tmp_path,
                                     ("cts/test_generated.py", "cts/test_runtime.py"))
    assert code == 0 and not failed, output[-3000:]
    assert re.search(r"\d+ passed", output)


def test_wrong_add_quant8_is_caught(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:wrong_add_quant8",
                                     f"{SELECTION} or (ADD and TENSOR_QUANT8_ASYMM)", vector_dir, tmp_path)
    assert code == 1, output[-3000:]
    assert "test_generated[ADD-TENSOR_QUANT8_ASYMM-nntsbroken_add_quant8]" in failed
    # Only models with an ADD on TENSOR_QUANT8_ASYMM fail (the amplified pool model requantizes with one).
    assert all(f.startswith("test_generated[ADD-TENSOR_QUANT8_ASYMM-") or "nntsbroken_avgpool_quant8_amplified" in f
               for f in failed), failed
    assert not [f for f in failed if "SIGNED" in f or "FLOAT" in f], failed
    assert "ADD TENSOR_QUANT8_ASYMM, test model nntsbroken_add_quant8" in output
    assert "|diff| 2 > tolerance 1" in output  # the worst element, by how much
    assert "replay: nnts vectors run" in output


def test_off_by_one_in_quant8_is_within_tolerance(vector_dir, tmp_path):
    """What the suite cannot catch: ADD quant8 off by one everywhere it is wrong."""
    code, output, failed = run_suite("nnapi_ref.drivers.broken:wrong_add_quant8_by_one",
                                     "nntsbroken_add_quant8 or (ADD and TENSOR_QUANT8_ASYMM)", vector_dir, tmp_path)
    assert code == 0 and not failed, output[-3000:]


def test_off_by_one_rounding_is_caught_where_amplified(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:off_by_one_rounding",
                                     f"{SELECTION} or AVERAGE_POOL_2D", vector_dir, tmp_path)
    assert code == 1, output[-3000:]
    # Caught where a later requantization amplifies the error past the tolerance...
    assert "test_generated[AVERAGE_POOL_2D-TENSOR_QUANT8_ASYMM-nntsbroken_avgpool_quant8_amplified]" in failed
    assert "AVERAGE_POOL_2D TENSOR_QUANT8_ASYMM, test model nntsbroken_avgpool_quant8_amplified" in output
    assert "expected 8, got 4" in output
    # ... but not on its own: one LSB is within the quant8 tolerance (the corpus' pools pass too).
    assert all("nntsbroken_avgpool_quant8_amplified" in f for f in failed), failed  # any variant of it


def test_float16_arithmetic_is_caught(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:float16_arithmetic",
                                     f"{SELECTION} or (AVERAGE_POOL_2D and float32 and not relaxed)", vector_dir,
                                     tmp_path)
    assert code == 1, output[-3000:]
    assert "test_generated[ADD-TENSOR_FLOAT32-nntsbroken_add_float32]" in failed
    assert "ADD TENSOR_FLOAT32, test model nntsbroken_add_float32" in output
    assert "outside tolerance" in output
    assert not [f for f in failed if "RELAXED" in f], "relaxed models may be computed in float16"
    assert not [f for f in failed if "QUANT8" in f]


def test_wrong_output_shape_is_caught(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:wrong_output_shape",
                                     f"{SELECTION} or (CONV_2D and TENSOR_FLOAT32)",
                                     vector_dir, tmp_path)
    assert code == 1, output[-3000:]
    assert "test_generated[CONV_2D-TENSOR_FLOAT32-nntsbroken_conv_float32_batch1]" in failed
    assert "output 0: dimensions [2, 2], expected [1, 2, 2, 1]" in output
    assert all(f.startswith("test_generated[CONV_2D-") for f in failed), failed  # the ADDs pass


def test_bad_timing_is_caught(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:bad_timing", f"measured_durations or {SELECTION}",
                                     vector_dir, tmp_path, ("cts/test_runtime.py", "cts/test_generated.py"))
    assert code == 1, output[-3000:]
    assert sorted(failed) == [f"test_measured_durations_are_consistent[{mode}]"  # outputs are right
                              for mode in ("async", "burst", "fenced", "sync")], failed
    assert "timing: launched time on hardware" in output and "exceeds the time in driver" in output


def test_hardware_buffer_offset_is_caught(vector_dir, tmp_path):
    """Only the BLOB hardware-buffer variant places arguments at offsets of a hardware buffer."""
    code, output, failed = run_suite("nnapi_ref.drivers.broken:hardware_buffer_offset", SELECTION, vector_dir,
                                     tmp_path, variants=("--variants", "sync,device_memory,hardware_buffer"))
    assert code == 1, output[-3000:]
    assert "test_generated[ADD-TENSOR_FLOAT32-nntsbroken_add_float32]" in failed
    assert "[hardware_buffer]" in output and "[sync]" not in output and "[device_memory]" not in output
    assert "--hardware-buffer" in output  # the replay line replays that variant


def test_hardware_buffer_unchecked_fails_vts_request_validation(vector_dir, tmp_path):
    code, output, failed = run_suite("nnapi_ref.drivers.broken:hardware_buffer_unchecked", SELECTION, vector_dir,
                                     tmp_path, ("vts/test_validate_request.py",))
    assert code == 1 and failed, output[-3000:]
    assert "sync, hardware-buffer pools: output 0: length past the pool's end: accepted" in output
    assert "sync: output 0: length past the pool's end" not in output  # shared memory pools are checked


# ---------------------------------------------------------------------------------------------
# accepts_invalid_model: straight through the driver interface
# ---------------------------------------------------------------------------------------------

def valid_model() -> Model:
    """out = a + b on float32 [2]."""
    operands = [opnd(T.TENSOR_FLOAT32, [2]), opnd(T.TENSOR_FLOAT32, [2]), opnd(T.INT32, lifetime=CONST, value=0),
                opnd(T.TENSOR_FLOAT32, [2], lifetime=OUT)]
    return Model(Subgraph(operands, [Operation(Op.ADD, (0, 1, 2), (3,))], (0, 1), (3,)))


def invalid_models() -> dict[str, Model]:
    models = {}

    def mutant(name, change):
        model = valid_model()
        change(model.main)
        models[name] = model

    mutant("quant8 operand with scale 0", lambda sg: sg.operands.__setitem__(
        0, opnd(T.TENSOR_QUANT8_ASYMM, [2], 0.0, 0)))
    mutant("operand type 999", lambda sg: setattr(sg.operands[1], "type", 999))
    mutant("operation reads operand 99", lambda sg: setattr(sg.operations[0], "inputs", (0, 99, 2)))
    mutant("ADD without its activation input", lambda sg: setattr(sg.operations[0], "inputs", (0, 1)))
    mutant("ADD of float32 and int32", lambda sg: sg.operands.__setitem__(1, opnd(T.TENSOR_INT32, [2])))
    mutant("constant with 2 values for a scalar", lambda sg: setattr(sg.operands[2], "value",
                                                                      np.zeros(2, np.int32)))
    mutant("model output never written", lambda sg: sg.operations.clear())
    mutant("output operand listed as an input", lambda sg: setattr(sg, "input_indexes", (0, 1, 3)))
    mutant("scalar with dimensions", lambda sg: setattr(sg.operands[2], "dimensions", (3,)))
    return models


def validation_problems(driver: hal.Device) -> list[str]:
    """Each invalid model must be rejected with INVALID_ARGUMENT by get_supported_operations and
    by prepare_model (VTS's validateModel); what the driver did instead."""
    problems = []
    for name, model in invalid_models().items():
        for call, run in (("get_supported_operations", lambda m: driver.get_supported_operations(m)),
                          ("prepare_model", lambda m: driver.prepare_model(
                              m, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, (), (), None))):
            try:
                run(model)
            except HalError as e:
                if e.status != ErrorStatus.INVALID_ARGUMENT:
                    problems.append(f"{call}: {name}: {e.status.name}, expected INVALID_ARGUMENT")
            except Exception as e:  # anything but a HalError escaping a driver is a failure too
                problems.append(f"{call}: {name}: raised {type(e).__name__}, expected INVALID_ARGUMENT")
            else:
                problems.append(f"{call}: {name}: accepted, expected INVALID_ARGUMENT")
    return problems


def test_reference_driver_rejects_invalid_models():
    assert validation_problems(ReferenceDevice()) == []
    assert isinstance(ReferenceDevice().prepare_model(valid_model(), PreferenceCode.FAST_SINGLE_ANSWER,
                                                      PriorityCode.MEDIUM, None, (), (), None), hal.PreparedModel)


def test_accepts_invalid_model_is_caught():
    driver = load_driver("nnapi_ref.drivers.broken:accepts_invalid_model")
    problems = validation_problems(driver)
    assert problems, "the driver that skips validation passed the validation checks"
    assert any("accepted, expected INVALID_ARGUMENT" in p for p in problems), problems
    assert any(p.startswith("prepare_model: quant8 operand with scale 0: accepted") for p in problems), problems


def test_accepts_invalid_model_fails_vts_validation(vector_dir, tmp_path):
    """The same through VTS's model-validation tests, where they exist: the reference driver
    passes a selection of them, the driver that skips validation fails it."""
    if not (ROOT / "vts" / "test_validate_model.py").exists():
        pytest.skip("vts/test_validate_model.py is not there yet")
    selection = "nntsbroken_add_quant8 and (operand_type or operand_rank)"
    paths = ("vts/test_validate_model.py",)
    code, output, failed = run_suite("reference", selection, vector_dir, tmp_path, paths)
    if code != 0 or not re.search(r"\d+ passed", output):
        pytest.skip(f"the reference driver does not pass VTS's model validation yet: {failed or output[-500:]}")
    code, output, failed = run_suite("nnapi_ref.drivers.broken:accepts_invalid_model", selection, vector_dir,
                                     tmp_path, paths)
    assert code == 1 and failed, output[-3000:]
    assert "not rejected with INVALID_ARGUMENT" in output


def test_broken_drivers_load_by_name():
    for name, cls in broken.ALL.items():
        driver = load_driver(f"nnapi_ref.drivers.broken:{name}")
        assert isinstance(driver, cls) and driver.get_name() == f"nnts-broken-{name}"
