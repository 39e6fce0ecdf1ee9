"""Models validated once: the runtime notes the HAL model it validated in ModelBuilder::finish, and
the reference driver takes that model's feature level instead of validating it again. Any other
model (a copy, a model of another process, one with extensions) is validated by the driver."""
from __future__ import annotations

import copy
import gc

import numpy as np

from nnapi_ref import Model, OperandCode as T, OperandType, OperationCode, hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.validation import runtime_validated_level

from .test_extensions import mixed_model


def add_model(level_op=OperationCode.ADD) -> Model:
    model = Model()
    t = OperandType(T.TENSOR_FLOAT32, [4])
    a, b = model.add_operand(t), model.add_operand(t)
    fuse = model.add_operand(OperandType(T.INT32))
    model.set_operand_value(fuse, np.int32(0))
    out = model.add_operand(t)
    model.add_operation(level_op, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def test_the_runtime_notes_the_model_it_validated():
    model = add_model()
    assert runtime_validated_level(model.hal_model) == model.feature_level == 27


def test_a_copy_or_a_model_nobody_finished_is_not_known():
    model = add_model()
    assert runtime_validated_level(copy.deepcopy(model.hal_model)) is None
    assert runtime_validated_level(hal.Model(hal.Subgraph([], [], (), ()))) is None


def test_an_entry_goes_with_its_model():
    # This model's own entry, not a count: other tests' models may be collected meanwhile.
    from nnapi_ref import validation
    model = add_model()
    key = id(model.hal_model)
    assert validation._runtime_validated[key][0]() is model.hal_model
    del model
    gc.collect()
    assert key not in validation._runtime_validated


def test_models_with_extensions_are_validated_by_the_driver():
    from nnapi_ref import using_drivers
    from nnapi_ref.drivers.example_extension import ExampleExtensionDevice as Device
    with using_drivers([ReferenceDevice(), Device()]):
        model = mixed_model()
    assert model.hal_model.extension_name_to_prefix and runtime_validated_level(model.hal_model) is None


def test_the_driver_still_rejects_an_invalid_copy():
    """VTS hands drivers mutated copies: a copy of a runtime model made invalid is rejected."""
    driver = ReferenceDevice()
    bad = copy.deepcopy(add_model().hal_model)
    bad.main.operations[0] = hal.Operation(OperationCode.ADD, (0, 1), (3,))  # ADD without its activation input
    try:
        driver.get_supported_operations(bad)
    except hal.HalError as e:
        assert e.status == hal.ErrorStatus.INVALID_ARGUMENT
    else:
        raise AssertionError("an invalid model was accepted")
