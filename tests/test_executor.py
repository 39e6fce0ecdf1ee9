"""The CPU executor's plan: constant inputs, the per-operation cache, release of temporaries."""
import subprocess
import sys

import numpy as np
import pytest

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


_ALLOCATION_PATTERN = """
import resource, sys
import numpy as np
from nnapi_ref import executor
if sys.argv[1] == "keep" and not executor.keep_freed_memory():
    print("unsupported"); sys.exit()
shapes = [(12544, 96), (3136, 96), (3136, 24), (3136, 144), (3136, 144), (3136, 24)]  # MobileNet-like
for _ in range(3):
    [np.ones(s, np.float32) for s in shapes]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    [np.ones(s, np.float32) for s in shapes]  # 5.4 MB live at once, freed together, 20 times
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_freed_activations_are_reused_without_page_faults():
    """After keep_freed_memory, an inference-like allocation pattern (activations of several
    sizes, alive together, then freed) is served from memory the process already has: glibc's
    defaults return it to the system and page-fault it back in (about 38k faults measured)."""
    result = subprocess.run([sys.executable, "-c", _ALLOCATION_PATTERN, "keep"], capture_output=True, text=True,
                            check=True)
    if result.stdout.strip() == "unsupported":
        pytest.skip("not glibc")
    assert int(result.stdout) < 2000, result.stdout
