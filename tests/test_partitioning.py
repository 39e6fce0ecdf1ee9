"""Partitioning across several in-process drivers, and CPU fallback."""
import numpy as np
import pytest

from nnapi_ref import (Compilation, Model, NnapiError, OperandCode as T, OperandType, OperationCode, Partitioning,
                       PreferenceCode, ResultCode, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.drivers.variants import FaultyDevice, SubsetDevice
from nnapi_ref.hal import ErrorStatus
from nnts.generators.builders import chain_model, execute_chain

ADD, MUL = OperationCode.ADD, OperationCode.MUL


A = np.array([[1, 2], [3, 4]], np.float32)
B = np.array([[0.5, -1], [2, 3]], np.float32)
EXPECTED = (A + B) * B + A


def compile_with(drivers, devices=None, preference=PreferenceCode.FAST_SINGLE_ANSWER):
    model = chain_model()
    compilation = Compilation(model, devices)
    compilation.set_preference(preference)
    compilation.finish()
    return compilation


def test_operations_go_to_the_device_that_supports_them():
    adder, multiplier = SubsetDevice("adder", [ADD], 0.5), SubsetDevice("multiplier", [MUL], 0.5)
    with using_drivers([ReferenceDevice(), adder, multiplier]):
        compilation = compile_with(None)
        steps = compilation.plan.steps
        assert [s.device.name for s in steps] == ["adder", "multiplier", "adder"]
        assert [s.operations for s in steps] == [[0], [1], [2]]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)


def test_faster_device_wins_and_ties_go_to_the_cpu():
    fast, slow = SubsetDevice("fast", None, 0.25), SubsetDevice("slow", None, 4.0)
    with using_drivers([slow, ReferenceDevice(), fast]):
        compilation = compile_with(None)
        assert compilation.plan.single and compilation.single_device.name == "fast"
    twin = SubsetDevice("twin", None, 1.0)
    with using_drivers([twin, ReferenceDevice()]):
        compilation = compile_with(None)
        assert compilation.single_device.name == "nnapi-reference"


def test_low_power_preference_uses_power_figures():
    class LowPower(SubsetDevice):
        def __init__(self):
            super().__init__("low-power", None, 2.0)
            from nnapi_ref import hal
            info = hal.PerformanceInfo(exec_time=2.0, power_usage=0.1)
            self.capabilities.operand_performance = [(c, info) for c, _ in self.capabilities.operand_performance]
    with using_drivers([ReferenceDevice(), LowPower()]):
        assert compile_with(None).single_device.name == "nnapi-reference"
        assert compile_with(None, preference=PreferenceCode.LOW_POWER).single_device.name == "low-power"


def test_consecutive_operations_on_one_device_form_one_step():
    adder_fast = SubsetDevice("adders", [ADD, MUL], 0.5)
    with using_drivers([ReferenceDevice(), adder_fast, SubsetDevice("mul-only", [MUL], 0.1)]):
        compilation = compile_with(None)
        names = [s.device.name for s in compilation.plan.steps]
        assert names == ["adders", "mul-only", "adders"]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)


def test_fallback_to_cpu_when_a_driver_fails_to_prepare():
    broken = FaultyDevice("broken", None, 0.1, fail_prepare=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), broken]):
        compilation = compile_with(None)
        assert compilation.single_device.name == "nnapi-reference"
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)


def test_step_falls_back_to_cpu_when_a_driver_fails_to_execute():
    adder = SubsetDevice("adder", [ADD], 0.5)
    multiplier = FaultyDevice("multiplier", [MUL], 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), adder, multiplier]):
        compilation = compile_with(None)
        assert [s.device.name for s in compilation.plan.steps] == ["adder", "multiplier", "adder"]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)
        assert multiplier.executions == 1


def test_single_step_falls_back_when_execution_fails():
    broken = FaultyDevice("broken", None, 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), broken]):
        compilation = compile_with(None)
        assert compilation.single_device.name == "broken"
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)
        assert broken.executions == 1


def test_no_fallback_for_an_explicit_device_list():
    broken = FaultyDevice("broken", None, 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), broken]) as devices:
        compilation = compile_with(None, [d for d in devices if d.name == "broken"])
        with pytest.raises(NnapiError) as e:
            execute_chain(compilation, A, B)
        assert e.value.code == ResultCode.OP_FAILED
        broken_prepare = FaultyDevice("broken2", None, 0.1, fail_prepare=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([broken_prepare]) as devices:
        with pytest.raises(NnapiError) as e:
            compile_with(None, devices)
        assert e.value.code == ResultCode.OP_FAILED


def test_explicit_devices_must_support_every_operation():
    with using_drivers([SubsetDevice("adder", [ADD])]) as devices:
        with pytest.raises(NnapiError) as e:
            compile_with(None, devices)
        assert e.value.code == ResultCode.BAD_DATA
        assert "MUL" in e.value.message


def test_explicit_pair_of_devices_partitions_without_cpu():
    adder, multiplier = SubsetDevice("adder", [ADD]), SubsetDevice("multiplier", [MUL])
    with using_drivers([ReferenceDevice(), adder, multiplier]) as devices:
        compilation = compile_with(None, [d for d in devices if d.name != "nnapi-reference"])
        assert [s.device.name for s in compilation.plan.steps] == ["adder", "multiplier", "adder"]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)


def test_partitioning_setting_without_fallback_reports_the_failure():
    broken = FaultyDevice("broken", None, 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), broken], Partitioning.WITHOUT_FALLBACK):
        compilation = compile_with(None)
        with pytest.raises(NnapiError) as e:
            execute_chain(compilation, A, B)
        assert e.value.code == ResultCode.OP_FAILED


def test_partitioning_setting_none_runs_everything_on_the_cpu():
    fast = SubsetDevice("fast", None, 0.1)
    with using_drivers([ReferenceDevice(), fast], Partitioning.NONE):
        compilation = compile_with(None)
        assert compilation.single_device.name == "nnapi-reference"
        assert fast.prepared_models == []


def test_unsupported_operation_falls_back_to_cpu_with_partial_drivers():
    with using_drivers([SubsetDevice("adder", [ADD], 0.5)]):
        compilation = compile_with(None)
        names = [s.device.name for s in compilation.plan.steps]
        assert names == ["adder", "nnapi-reference", "adder"]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), EXPECTED)


def test_step_models_pass_only_what_crosses_steps():
    adder, multiplier = SubsetDevice("adder", [ADD], 0.5), SubsetDevice("multiplier", [MUL], 0.5)
    with using_drivers([ReferenceDevice(), adder, multiplier]):
        compilation = compile_with(None)
        first, second, third = compilation.plan.steps
        assert len(first.model.main.input_indexes) == 2 and len(first.model.main.output_indexes) == 1
        assert len(second.model.main.input_indexes) == 2  # the sum and b
        assert len(third.model.main.input_indexes) == 2  # the product and a


def test_operations_added_in_any_order_run_and_report_support_in_that_order():
    """MUL is added before the ADD that feeds it: drivers get execution order, the application
    sees supported-operation flags in the order it added the operations."""
    model = Model()
    t = OperandType(T.TENSOR_FLOAT32, [2, 2])
    a, b, s, out = model.add_operand(t), model.add_operand(t), model.add_operand(t), model.add_operand(t)
    fuse = model.add_operand(OperandType(T.INT32))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(MUL, [s, b, fuse], [out])
    model.add_operation(ADD, [a, b, fuse], [s])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    assert [op.type for op in model.hal_model.main.operations] == [ADD, MUL]
    with using_drivers([SubsetDevice("multiplier", [MUL])]) as devices:
        assert model.get_supported_operations_for_devices(devices) == [True, False]
    compilation = Compilation(model)
    compilation.finish()
    np.testing.assert_array_equal(execute_chain(compilation, A, B), (A + B) * B)
