"""What a model, a test-vector file or a .tflite file declares is bounded before anything is
allocated: NNAPI's own 4 GiB bound on an operand (BAD_DATA, as the NDK's addOperand), and nnts's
memory budget (OUT_OF_MEMORY, ``NNTS_MEMORY_BUDGET``) on what an operation, an execution or a file
read would allocate. Each entry point says so in one line; nothing is allocated first."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Compilation, Execution, Model, OperandType, budget
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode, OperationCode, ResultCode
from nnts.cli import main

F32 = "TENSOR_FLOAT32"
MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"


@pytest.fixture(autouse=True)
def default_budget():
    yield
    budget.set_limit(budget.DEFAULT_BYTES)


def _operand(type_, dims, lifetime, data=()):
    return {"type": type_, "dimensions": dims, "scale": 0.0, "zero_point": 0, "lifetime": lifetime, "data": list(data)}


def _vector_file(folder: Path, operands, operations, inputs, outputs) -> str:
    path = folder / "declared.json"
    path.write_text(json.dumps({"format": "nnapi-test-vector/1", "source": "test", "license": "test", "tests": [
        {"name": "declared", "main": {"operands": operands, "operations": operations, "input_indexes": inputs,
                                      "output_indexes": outputs}}]}))
    return str(path)


def _tile(folder: Path, multiples) -> str:
    """TILE of a 1x1 input by constant ``multiples``: outputs of any size from a few bytes of file."""
    return _vector_file(folder, [_operand(F32, [1, 1], "SUBGRAPH_INPUT", [1]),
                                 _operand("TENSOR_INT32", [2], "CONSTANT_COPY", multiples),
                                 _operand(F32, [0, 0], "SUBGRAPH_OUTPUT")],
                        [{"type": "TILE", "inputs": [0, 1], "outputs": [2]}], [0], [2])


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_an_operand_past_nnapis_4_gib_is_bad_data_when_declared():
    model = Model()
    with pytest.raises(NnapiError) as e:
        model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, [100000, 100000, 100]))
    assert e.value.code == ResultCode.BAD_DATA and "beyond NNAPI's uint32_t sizes" in e.value.message
    model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, [1024, 1024, 1023]))  # just under: accepted


@pytest.mark.parametrize("declared", ["output", "constant"])
def test_a_vector_file_declaring_a_huge_operand_is_one_line(tmp_path, capsys, declared):
    huge = [100000, 100000, 100]
    operands = [_operand(F32, [1], "SUBGRAPH_INPUT", [1]), _operand(F32, [1], "SUBGRAPH_INPUT", [1]),
                _operand("INT32", [], "CONSTANT_COPY", [0]), _operand(F32, [1], "SUBGRAPH_OUTPUT", [2])]
    if declared == "output":
        operands[3] = _operand(F32, huge, "SUBGRAPH_OUTPUT")
    else:  # a constant whose declared length is far beyond the file's data
        operands[1] = _operand(F32, huge, "CONSTANT_COPY", [1])
    path = _vector_file(tmp_path, operands, [{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}],
                        [0] if declared == "constant" else [0, 1], [3])
    code, out = _run(capsys, "vectors", "run", path, "--inline")
    assert code == 1 and "BAD_DATA" in out and "beyond NNAPI's uint32_t sizes" in out, out
    assert "Traceback" not in out
    code, out = _run(capsys, "graph", path)  # a picture of the declaration: nothing allocated
    assert code == 0 and "100000x100000x100" in out, out


def test_an_operation_whose_outputs_pass_the_budget_is_refused_before_it_allocates(tmp_path, capsys, monkeypatch):
    path = _tile(tmp_path, [1024, 1024])  # a 4 MiB output from a 1x1 input
    monkeypatch.setenv("NNTS_MEMORY_BUDGET", "1M")
    for contained in ((), ("--inline",)):
        code, out = _run(capsys, "vectors", "run", path, *contained)
        assert code == 1 and "the outputs of main operation 0 (TILE): 4 MiB, over nnts's memory budget of 1 MiB" \
            in out, out
    monkeypatch.setenv("NNTS_MEMORY_BUDGET", "8M")
    code, out = _run(capsys, "vectors", "run", path, "--inline")
    assert "memory budget" not in out  # within it, it runs (its declared output is too small: a failure)


def test_the_runtime_api_gets_out_of_memory_when_shapes_are_known_only_at_execution():
    budget.set_limit(1 << 20)
    model = Model()
    x = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, [1, 1]))
    multiples = model.add_operand(OperandType(OperandCode.TENSOR_INT32, [2]))
    out = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, [0, 0]))
    model.add_operation(OperationCode.TILE, [x, multiples], [out])
    model.identify_inputs_and_outputs([x, multiples], [out])
    model.finish()
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, np.ones((1, 1), np.float32))
    execution.set_input(1, np.array([1024, 1024], np.int32))
    execution.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(NnapiError) as e:
        execution.compute()
    # (the driver's RESOURCE_EXHAUSTED, as the NDK's runtime returns it)
    assert e.value.code == ResultCode.RESOURCE_EXHAUSTED_TRANSIENT, e.value
    assert "the outputs of main operation 0 (TILE): 4 MiB, over nnts's memory budget" in e.value.message


def test_a_file_too_large_to_read_under_the_budget_is_one_line(tmp_path, capsys, monkeypatch):
    path = _tile(tmp_path, [2, 2])
    monkeypatch.setenv("NNTS_MEMORY_BUDGET", "1K")
    code, out = _run(capsys, "vectors", "run", path)
    assert code == 1 and "reading this test-vector file" in out and "OUT_OF_MEMORY" in out, out
    monkeypatch.setenv("NNTS_MEMORY_BUDGET", "plenty")
    code, out = _run(capsys, "vectors", "run", path)
    assert code == 2 and "NNTS_MEMORY_BUDGET" in out and out.count("\n") == 1, out


@pytest.mark.skipif(not (MODELS / "lstm_asr_like_float.tflite").exists(), reason="needs ../shared/models")
def test_a_tflite_model_beyond_the_budget_is_one_line(capsys, monkeypatch):
    model = str(MODELS / "lstm_asr_like_float.tflite")
    monkeypatch.setenv("NNTS_MEMORY_BUDGET", "64")  # bytes: below the file and its tensors
    code, out = _run(capsys, "graph", model)
    assert code == 2 and out.count("\n") == 1 and "over nnts's memory budget of 64 bytes" in out, out


def test_budget_sizes_parse():
    assert budget.parse("2G") == 2 << 30 and budget.parse("512M") == 512 << 20 and budget.parse("4096") == 4096
    assert budget.parse("1.5KiB") == 1536
    for bad in ("", "0", "-1G", "lots", "1X"):
        with pytest.raises(ValueError):
            budget.parse(bad)
