"""IF and WHILE: branch choice, loop semantics (input-output, state-only and input-only values),
the loop timeout, and validation of the referenced models."""
import numpy as np
import pytest

from nnapi_ref import (Compilation, Execution, Model, NnapiError, OperandCode as T, OperandType, OperationCode,
                       ResultCode)

F1 = OperandType(T.TENSOR_FLOAT32, [1])
B1 = OperandType(T.TENSOR_BOOL8, [1])
I32 = OperandType(T.INT32)


def binary_model(code, fuse=True, out_type=F1) -> Model:
    """out = a <op> b on [1] float tensors."""
    model = Model()
    a, b = model.add_operand(F1), model.add_operand(F1)
    inputs = [a, b]
    if fuse:
        f = model.add_operand(I32)
        model.set_operand_value(f, np.int32(0))
        inputs.append(f)
    out = model.add_operand(out_type)
    model.add_operation(code, inputs, [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def run(model: Model, *inputs, loop_timeout_ns=None):
    execution = Execution(compile_(model))
    for i, x in enumerate(inputs):
        execution.set_input(i, np.asarray(x, np.float32).reshape(-1) if not isinstance(x, np.ndarray) else x)
    out = np.zeros(1, np.float32)
    execution.set_output(0, out)
    if loop_timeout_ns is not None:
        execution.set_loop_timeout(loop_timeout_ns)
    execution.compute()
    return out


def compile_(model):
    compilation = Compilation(model)
    compilation.finish()
    return compilation


def if_model(then_model, else_model) -> Model:
    model = Model()
    cond, then_ref, else_ref = model.add_operand(B1), model.add_operand(OperandType(T.MODEL)), \
        model.add_operand(OperandType(T.MODEL))
    a, b, out = model.add_operand(F1), model.add_operand(F1), model.add_operand(F1)
    model.set_operand_value_from_model(then_ref, then_model)
    model.set_operand_value_from_model(else_ref, else_model)
    model.add_operation(OperationCode.IF, [cond, then_ref, else_ref, a, b], [out])
    model.identify_inputs_and_outputs([cond, a, b], [out])
    model.finish()
    return model


@pytest.mark.parametrize("condition,expected", [(True, 7.0 + 2.0), (False, 7.0 - 2.0)])
def test_if_runs_the_branch_the_condition_selects(condition, expected):
    model = if_model(binary_model(OperationCode.ADD), binary_model(OperationCode.SUB))
    out = run(model, np.array([condition]), 7.0, 2.0)
    assert out[0] == expected


def sum_loop_model() -> Model:
    """WHILE i < n: i = i + 1; s = s + i. The loop variables are (s, i): s is input-output (the
    WHILE's output), i is state-only, n is input-only. From s = i = 0 it returns n(n+1)/2."""
    # body(s, i, n) = (s + i + 1, i + 1)
    body = Model()
    bi, bs, bn = body.add_operand(F1), body.add_operand(F1), body.add_operand(F1)
    one, fuse = body.add_operand(F1), body.add_operand(I32)
    body.set_operand_value(one, np.ones(1, np.float32))
    body.set_operand_value(fuse, np.int32(0))
    next_i, next_s = body.add_operand(F1), body.add_operand(F1)
    body.add_operation(OperationCode.ADD, [bi, one, fuse], [next_i])
    body.add_operation(OperationCode.ADD, [bs, next_i, fuse], [next_s])
    body.identify_inputs_and_outputs([bs, bi, bn], [next_s, next_i])
    body.finish()
    # condition(s, i, n) = i < n
    cond = Model()
    cs, ci, cn, less = cond.add_operand(F1), cond.add_operand(F1), cond.add_operand(F1), cond.add_operand(B1)
    cond.add_operation(OperationCode.LESS, [ci, cn], [less])
    cond.identify_inputs_and_outputs([cs, ci, cn], [less])
    cond.finish()
    model = Model()
    cond_ref, body_ref = model.add_operand(OperandType(T.MODEL)), model.add_operand(OperandType(T.MODEL))
    s0, i0, n, out = model.add_operand(F1), model.add_operand(F1), model.add_operand(F1), model.add_operand(F1)
    model.set_operand_value_from_model(cond_ref, cond)
    model.set_operand_value_from_model(body_ref, body)
    model.add_operation(OperationCode.WHILE, [cond_ref, body_ref, s0, i0, n], [out])
    model.identify_inputs_and_outputs([s0, i0, n], [out])
    model.finish()
    return model


@pytest.mark.parametrize("n", [0, 1, 4, 10])
def test_while_sums_one_to_n(n):
    out = run(sum_loop_model(), 0.0, 0.0, float(n))
    assert out[0] == n * (n + 1) / 2


def test_while_times_out_with_missed_deadline():
    with pytest.raises(NnapiError) as e:
        run(sum_loop_model(), 0.0, 0.0, 1e30, loop_timeout_ns=1_000_000)  # i never reaches 1e30 in float32
    assert e.value.code == ResultCode.MISSED_DEADLINE_TRANSIENT


def test_if_branch_with_mismatched_inputs_is_rejected():
    one_input = Model()
    a, out = one_input.add_operand(F1), one_input.add_operand(F1)
    fuse = one_input.add_operand(I32)
    one_input.set_operand_value(fuse, np.int32(0))
    one_input.add_operation(OperationCode.ADD, [a, a, fuse], [out])
    one_input.identify_inputs_and_outputs([a], [out])
    one_input.finish()
    with pytest.raises(NnapiError) as e:
        if_model(one_input, binary_model(OperationCode.SUB))
    assert e.value.code == ResultCode.BAD_DATA and "then model input" in e.value.message


def test_if_branch_output_of_another_type_is_rejected():
    less = binary_model(OperationCode.LESS, fuse=False, out_type=B1)
    with pytest.raises(NnapiError) as e:
        if_model(less, less)
    assert e.value.code == ResultCode.BAD_DATA


def test_if_condition_must_be_bool8_of_shape_1():
    model = Model()
    cond = model.add_operand(OperandType(T.TENSOR_BOOL8, [2]))
    then_ref, else_ref = model.add_operand(OperandType(T.MODEL)), model.add_operand(OperandType(T.MODEL))
    a, b, out = model.add_operand(F1), model.add_operand(F1), model.add_operand(F1)
    model.set_operand_value_from_model(then_ref, binary_model(OperationCode.ADD))
    model.set_operand_value_from_model(else_ref, binary_model(OperationCode.ADD))
    model.add_operation(OperationCode.IF, [cond, then_ref, else_ref, a, b], [out])
    model.identify_inputs_and_outputs([cond, a, b], [out])
    with pytest.raises(NnapiError) as e:
        model.finish()
    assert e.value.code == ResultCode.BAD_DATA and "shape [1]" in e.value.message


def test_referenced_model_must_be_finished():
    unfinished = Model()
    model = Model()
    ref = model.add_operand(OperandType(T.MODEL))
    with pytest.raises(NnapiError) as e:
        model.set_operand_value_from_model(ref, unfinished)
    assert e.value.code == ResultCode.BAD_DATA
