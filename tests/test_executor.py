"""The CPU executor's plan: constant inputs, the per-operation cache, release of temporaries."""
import numpy as np

from nnapi_ref import Model, OperandCode as T, OperandType, OperationCode
from nnapi_ref.executor import Executor, prepare_plans
from nnapi_ref.ops.base import Call


def test_derived_values_are_remembered_only_for_constant_inputs():
    calls = []

    def compute():
        calls.append(1)
        return np.ones(2)

    call = Call([], [], cache={}, constant_inputs=frozenset({1}))
    call.derived("weights", [1], compute)
    call.derived("weights", [1], compute)
    assert len(calls) == 1
    call.derived("mixed", [0, 1], compute)
    call.derived("mixed", [0, 1], compute)
    assert len(calls) == 3
    Call([], []).derived("weights", [1], compute)  # no cache (compile-time inference): computed
    assert len(calls) == 4


def chain_model():
    """t = x + c; out = t + x, with c constant."""
    model = Model()
    t4 = OperandType(T.TENSOR_FLOAT32, [4])
    x, c, fuse, t, out = (model.add_operand(t4), model.add_operand(t4), model.add_operand(OperandType(T.INT32)),
                          model.add_operand(t4), model.add_operand(t4))
    model.set_operand_value(c, np.arange(4, dtype=np.float32))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [x, c, fuse], [t])
    model.add_operation(OperationCode.ADD, [t, x, fuse], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


def test_plan_knows_constant_inputs_and_releases_temporaries():
    plans = prepare_plans(chain_model().hal_model)
    first, second = plans[0].steps
    assert first.constant_inputs == frozenset({1, 2}) and second.constant_inputs == frozenset({2})
    assert first.release == () and list(second.release) == [3]  # t dies after its last use
    (out,) = Executor(plans, relaxed=False).run([np.ones(4, np.float32)])
    np.testing.assert_array_equal(out, [2, 3, 4, 5])
