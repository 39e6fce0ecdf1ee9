"""Zero-sized inputs: the operations that take them, and the result code of those that do not.

AOSP's CPU executor (``common/CpuExecutor.cpp``) fails an operation given an input tensor with a
zero dimension before the operation runs, unless it is registered with ``allowZeroSizedInput``
(28 operations: the activations, pools, convolutions, ADD/SUB/MUL/DIV, CONCATENATION, SLICE, the
detection operations, ...). Operations registered with the OperationResolver fail with
OP_FAILED (``checkNoZeroSizedInput``); those its executor still switches on fail with BAD_DATA
(``allParametersPresent`` returns ANEURALNETWORKS_BAD_DATA). A zero-sized tensor reaches an
operation only as the output of another: here BOX_WITH_NMS_LIMIT keeping no box.
"""
import re
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Compilation, Execution, Model, NnapiError, OperandType, OperationCode as O, ResultCode
from nnapi_ref.ops import load_all
from nnapi_ref.types import OperandCode as T
from nnts.generators.builders import add_constant, add_nms, nms_scores

AOSP = Path(__file__).resolve().parents[1].parent / "shared" / "aosp-native" / "neuralnetworks" / "common"
F32, I32 = T.TENSOR_FLOAT32, T.TENSOR_INT32
NONE_KEPT, TWO_KEPT = [0.1, 0.2, 0.3, 0.4], [0.9, 0.2, 0.7, 0.1]


def nms_then(code: O, params: list[tuple[T, object]], out_dims: list[int], out_type: T = F32) -> Model:
    """BOX_WITH_NMS_LIMIT over four boxes (the scores an input), its kept boxes [n, 4] fed to
    ``code`` with the constant ``params`` after them; the model's output is ``code``'s."""
    model = Model()
    scores, _, boxes, _, _ = add_nms(model)
    args = []
    for type_, value in params:
        dims = list(np.shape(value)) if type_ in (F32, I32) else []
        args.append(add_constant(model, type_, value, dims))
    out = model.add_operand(OperandType(out_type, out_dims))
    model.add_operation(code, [boxes, *args], [out])
    model.identify_inputs_and_outputs([scores], [out])
    model.finish()
    return model


def run(model: Model, class1_scores) -> np.ndarray:
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, nms_scores(class1_scores))
    out = np.zeros(64, np.float32)
    execution.set_output(0, out)
    execution.compute()
    n = int(np.prod(execution.get_output_operand_dimensions(0)))
    return out[:n]


# (operation, its inputs after the boxes, output dims, the code AOSP fails it with given no box)
REFUSING = [
    (O.EXP, [], [0, 4], ResultCode.OP_FAILED),
    (O.LOG_SOFTMAX, [(T.FLOAT32, np.float32(1.0)), (T.INT32, np.int32(-1))], [0, 4], ResultCode.OP_FAILED),
    (O.REDUCE_SUM, [(I32, np.array([1], np.int32)), (T.BOOL, np.bool_(False))], [0], ResultCode.OP_FAILED),
    (O.RESHAPE, [(I32, np.array([-1, 2], np.int32))], [0, 2], ResultCode.BAD_DATA),
    (O.MEAN, [(I32, np.array([1], np.int32)), (T.INT32, np.int32(0))], [0], ResultCode.BAD_DATA),
    (O.MAXIMUM, [(F32, np.zeros(4, np.float32))], [0, 4], ResultCode.BAD_DATA),
]


@pytest.mark.parametrize("code,params,dims,refusal", REFUSING, ids=[c[0].name for c in REFUSING])
def test_operations_without_zero_sized_support_fail(code, params, dims, refusal):
    model = nms_then(code, params, dims)
    assert run(model, TWO_KEPT).size > 0  # the same model runs where boxes are kept
    with pytest.raises(NnapiError) as e:
        run(model, NONE_KEPT)
    assert e.value.code == refusal
    assert "zero-sized" in e.value.message


ACCEPTING = [
    (O.ADD, [(F32, np.ones(4, np.float32)), (T.INT32, np.int32(0))], [0, 4]),
    (O.RELU, [], [0, 4]),
    (O.TRANSPOSE, [(I32, np.array([1, 0], np.int32))], [4, 0]),
    (O.SLICE, [(I32, np.array([0, 1], np.int32)), (I32, np.array([-1, 2], np.int32))], [0, 2]),
]


@pytest.mark.parametrize("code,params,dims", ACCEPTING, ids=[c[0].name for c in ACCEPTING])
def test_operations_with_zero_sized_support_give_zero_sized_outputs(code, params, dims):
    assert run(nms_then(code, params, dims), NONE_KEPT).size == 0


@pytest.mark.skipif(not AOSP.is_dir(), reason="needs ../shared/aosp-native (AOSP's CPU executor sources)")
def test_declarations_match_aosps_executor():
    """Each operation's ``zero_sized_inputs`` read against AOSP's sources: None exactly for the
    registrations with ``allowZeroSizedInput = true`` and the executor's cases that run without
    ``allParametersPresent`` (plus IF and WHILE); BAD_DATA exactly for the cases that call it."""
    allowing = set()
    for source in (AOSP / "cpu_operations").glob("*.cpp"):
        for name, body in re.findall(r"NN_REGISTER_OPERATION\w*\(\s*(\w+),(.*?)\);", source.read_text(), re.S):
            if "allowZeroSizedInput = true" in body:
                allowing.add(name)
    executor = (AOSP / "CpuExecutor.cpp").read_text()
    switch = executor[executor.index("switch (operation.type)"):executor.index("mOperationResolver->findOperation")]
    checked, unchecked = set(), set()
    parts = re.split(r"((?:case OperationType::\w+:\s*)+)", switch)  # [before, labels, body, labels, body, ...]
    for labels, body in zip(parts[1::2], parts[2::2]):
        names = set(re.findall(r"OperationType::(\w+)", labels)) - {"OEM_OPERATION"}
        (checked if "allParametersPresent(" in body else unchecked).update(names)
    assert len(allowing) == 28 and checked and unchecked
    declared = {code.name: impl.zero_sized_inputs for code, impl in load_all().items()}
    assert {n for n, v in declared.items() if v is None} == allowing | unchecked | {"IF", "WHILE"}
    assert {n for n, v in declared.items() if v == ResultCode.BAD_DATA} == checked
