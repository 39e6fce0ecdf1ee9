"""The cheap paths of model building, validation and execution (the per-model overhead)
answer as the checks they shortcut: the same result code and the same first problem named."""
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from nnapi_ref import (Compilation, Execution, Model, NnapiError, OperandCode as T, OperandType, OperationCode,
                       ResultCode, hal, ops)
from nnapi_ref.types import Lifetime, combine_dimensions
from nnapi_ref.validation import plain_indexes, validate_model


@pytest.mark.parametrize("indexes, count, expected", [
    ((), 0, True), ((0, 2, 1), 3, True), ([1], 2, True),
    ((0, 3), 3, False), ((-1,), 3, False),
    ((np.int64(1),), 3, False), ((True,), 3, False), ((1.0,), 3, False),  # not plain ints: the loop decides
])
def test_plain_indexes(indexes, count, expected):
    assert plain_indexes(indexes, count) is expected


def test_plain_indexes_falls_back_to_the_loop_for_numpy_indexes():
    """A numpy integer index is valid: the fast path declines it and the per-index check accepts it."""
    model = Model()
    a = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    b = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    model.add_operation(OperationCode.FLOOR, [np.int64(a)], [np.int32(b)])
    model.identify_inputs_and_outputs([np.int64(a)], [b])
    model.finish()
    assert model.hal_model.main.operations[0].inputs == (0,)


def _two_operand_model() -> tuple[Model, int, int]:
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    c = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    model.set_operand_value(c, np.zeros(2, np.float32))
    return model, x, c


def test_identify_names_the_first_problem_in_order():
    """A valued operand listed before an out-of-range index: the valued one is named, as the
    per-index loop (no fast path) would."""
    model, x, c = _two_operand_model()
    with pytest.raises(NnapiError) as e:
        model.identify_inputs_and_outputs([c, 99], [x])
    assert e.value.code == ResultCode.BAD_DATA and "input operand 1 already has a value" in e.value.message
    with pytest.raises(NnapiError) as e:
        model.identify_inputs_and_outputs([99, c], [x])
    assert e.value.code == ResultCode.BAD_DATA and "operand index 99 out of range" in e.value.message


def test_finish_still_rejects_a_per_channel_operand_without_its_parameters():
    """finish() does not check operand types again (add_operand did), except this one rule
    add_operand lets wait."""
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 0))
    w = model.add_operand(OperandType(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [1, 1, 1, 1]))  # no parameters set
    b = model.add_operand(OperandType(T.TENSOR_INT32, [1]))
    scalars = [model.add_operand(OperandType(T.INT32)) for _ in range(4)]
    for k, v in zip(scalars, (1, 1, 1, 0)):  # padding SAME, strides 1, no activation
        model.set_operand_value(k, np.int32(v))
    y = model.add_operand(OperandType(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 0))
    model.add_operation(OperationCode.CONV_2D, [x, w, b] + scalars, [y])
    model.identify_inputs_and_outputs([x, w, b], [y])
    with pytest.raises(NnapiError) as e:
        model.finish()
    assert e.value.code == ResultCode.BAD_DATA
    assert "TENSOR_QUANT8_SYMM_PER_CHANNEL operand without per-channel quantization parameters" in e.value.message


def test_finish_rejects_a_subgraph_operand_without_a_model():
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    y = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    model.add_operand(OperandType(T.SUBGRAPH))
    model.add_operation(OperationCode.FLOOR, [x], [y])
    model.identify_inputs_and_outputs([x], [y])
    with pytest.raises(NnapiError) as e:
        model.finish()
    assert e.value.code == ResultCode.BAD_DATA and "a SUBGRAPH operand must have SUBGRAPH lifetime" in e.value.message


def _floor_model(writers: int) -> hal.Model:
    operands = [hal.Operand(T.TENSOR_FLOAT32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_FLOAT32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(OperationCode.FLOOR, (0,), (1,)) for _ in range(writers)]
    return hal.Model(hal.Subgraph(operands, operations, (0,), (1,)))


def test_an_operand_written_twice_is_named():
    assert validate_model(_floor_model(1)) == 27
    with pytest.raises(NnapiError) as e:
        validate_model(_floor_model(2))
    assert e.value.code == ResultCode.BAD_DATA and "operand 1 is written by 2 operations" in e.value.message


def test_signature_match_remembered_alike_for_codes_and_ints():
    add = ops.get(OperationCode.ADD)
    by_codes = add.match([T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.INT32], [T.TENSOR_FLOAT32])
    assert by_codes is not None
    assert add.match([3, 3, 1], [3]) is by_codes  # the same types as plain ints
    assert add.match([3, 3, 1], [4]) is None
    assert add.match([[3], 3, 1], [3]) is None  # an unhashable type: no match, no crash


@pytest.mark.parametrize("code", [[3], {}, 1.5, "x", 99])
def test_add_operand_remembers_only_accepted_types_and_rejects_any_other(code):
    """The remembered accepted types are looked up first: an invalid code, hashable or not, is
    still BAD_DATA, every time."""
    model = Model()
    for _ in range(2):
        with pytest.raises(NnapiError) as e:
            model.add_operand(code, (2,))
        assert e.value.code == ResultCode.BAD_DATA
    assert model.add_operand(3, (2,)) == model.add_operand(3, (2,)) - 1  # an accepted type, twice


def test_combine_dimensions_shortcut_agrees():
    assert combine_dimensions((2, 3), (2, 3)) == (2, 3)
    assert combine_dimensions((2, 0), (2, 3)) == (2, 3)
    assert combine_dimensions((), (4,)) == (4,) and combine_dimensions((4,), ()) == (4,)
    assert combine_dimensions((2, 3), (3, 2)) is None


def test_unaligned_input_is_computed_from_an_aligned_copy():
    """The reference driver copies an input whose bytes sit at an address its type cannot be read
    at (now told by the array's aligned flag)."""
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [3]))
    y = model.add_operand(OperandType(T.TENSOR_FLOAT32, [3]))
    model.add_operation(OperationCode.FLOOR, [x], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    compilation = Compilation(model)
    compilation.finish()
    raw = np.zeros(13, np.uint8)
    raw[1:13] = np.array([1.5, -2.5, 3.25], np.float32).view(np.uint8)
    out = np.zeros(3, np.float32)
    execution = Execution(compilation)
    execution.set_input(0, raw[1:13])  # one byte past an aligned start
    execution.set_output(0, out)
    execution.compute()
    assert out.tolist() == [1.0, -3.0, 3.0]


def test_bench_overhead_refuses_bad_options():
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--rounds", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--rounds must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--baseline", "/nonexistent/python"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "not an executable Python" in done.stderr


# The fuzz harness measurements run this checkout's harness under atheris.
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="needs atheris (pip install 'nnts[fuzz]')")


@needs_atheris
def test_bench_overhead_says_in_one_line_what_a_baseline_lacks(tmp_path):
    """A baseline without atheris, and one whose measurement fails: one line each, no traceback."""
    without_atheris = tmp_path / "without-atheris"
    without_atheris.write_text("#!/bin/sh\nexit 1\n")
    failing = tmp_path / "failing"  # imports atheris, then fails every measurement
    failing.write_text('#!/bin/sh\n[ "$2" = "-c" ] && exit 0\nexit 3\n')
    for script in (without_atheris, failing):
        script.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--baseline", str(without_atheris)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "atheris is not installed for" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--baseline", str(failing),
                           "--rounds", "1", "--batches", "1", "--inputs", "10", "--fuzz-runs", "0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "measurement under" in done.stderr and "exit code 3" in done.stderr
    assert "Traceback" not in done.stderr


@needs_atheris
def test_bench_overhead_measures_how_thorough_the_campaign_is():
    """The overhead rows of this checkout, and with --coverage-runs libFuzzer's cov and ft of a
    seeded campaign and the lines and arcs of the model builder and validation its corpus runs (a
    corpus of the seeds at least)."""
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--rounds", "1", "--batches", "1",
                           "--inputs", "20", "--fuzz-runs", "0", "--coverage-runs", "300"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line[:44].strip(): float(line.split()[-1]) for line in done.stdout.splitlines()[1:]}
    assert rows["one ADD total (CPU us)"] > 0 and rows["model harness, fixed inputs (exec/CPU s)"] > 0
    assert rows["coverage campaign: libFuzzer's cov (edges)"] > 0
    assert rows["coverage campaign: lines of COVERED_FILES"] > 100
    assert rows["coverage campaign: arcs of COVERED_FILES"] > rows["coverage campaign: lines of COVERED_FILES"]
    done = subprocess.run([sys.executable, "-m", "nnts.fuzz.bench_overhead", "--coverage-runs", "-1"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "must not be negative" in done.stderr


@pytest.mark.parametrize("inputs", [(b"a much longer input", b"short", b""),
                                    (bytes(range(256)) * 300, b"short")],  # 76,800 bytes: past the first map's 64 KiB
                         ids=["short-after-long", "longer-than-the-map"])
def test_recorded_input_reads_back_while_it_runs(tmp_path, inputs):
    """The fuzzer child's record of the running input, a memory map of a file: a short input
    after a long one reads back as itself, one longer than the map (the plain loop's inputs grow)
    gets a larger map and reads back whole, and a returned one reads back as none."""
    from nnts.fuzz import engine
    path = str(tmp_path / "pending")
    seen = []

    def harness(data):
        seen.append(engine.died_in(path))
    harness.seed_inputs = lambda: []
    recorded = engine.Recorded(harness, path)
    for data in inputs:
        recorded(data)
    assert seen == list(inputs)
    assert engine.died_in(path) is None


def test_add_operand_takes_c_types_as_they_are_and_converts_the_rest_alike():
    """A tuple of ints, a float scale and an int zero point (the fuzz harness's and most callers'
    arguments) skip the conversions; other spellings of the same type give the same operand, and
    what the conversions refuse is still refused."""
    model = Model()
    plain = model.add_operand(T.TENSOR_QUANT8_ASYMM, (2, 3), 0.5, 1)
    spelled = model.add_operand(T.TENSOR_QUANT8_ASYMM, [np.int64(2), 3.0], 0.5, np.int32(1))
    typed = model.add_operand(OperandType(T.TENSOR_QUANT8_ASYMM, (2, 3), 0.5, 1), (9,), 7.0, 5)  # arguments ignored
    operands = model._to_hal().main.operands
    for k in (spelled, typed):
        assert (operands[k].dimensions, operands[k].scale, operands[k].zero_point) == ((2, 3), 0.5, 1)
        assert type(operands[k].scale) is float and all(type(d) is int for d in operands[k].dimensions)
    assert operands[plain].type is T.TENSOR_QUANT8_ASYMM
    with pytest.raises(NnapiError) as e:
        model.add_operand(None, (2,), 0.0, 0)
    assert e.value.code == ResultCode.UNEXPECTED_NULL
    for dims, zero_point in (((True,), 0), ((2,), True)):  # a bool is no uint32_t / int32_t
        with pytest.raises(NnapiError) as e:
            model.add_operand(T.TENSOR_FLOAT32, dims, 0.0, zero_point)
        assert e.value.code == ResultCode.BAD_DATA
