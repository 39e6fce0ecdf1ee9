"""Partial drivers, as real accelerators are: the reference driver (or a broken one of
:mod:`nnapi_ref.drivers.broken`) supporting only some operations, on some data types, at a feature
level, for testing that the suite tests such a driver as hard as a complete one.

========================  ==================================================================
``npu13``                 ADD, MUL, SUB, CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D,
                          MAX_POOL_2D, RELU, RELU6, SOFTMAX, FULLY_CONNECTED, RESHAPE and
                          CONCATENATION on TENSOR_FLOAT32 and TENSOR_QUANT8_ASYMM, feature level 30
``quant8_only``           every operation on TENSOR_QUANT8_ASYMM and TENSOR_QUANT8_ASYMM_SIGNED
``float32_level27``       every operation on TENSOR_FLOAT32, feature level 27
========================  ==================================================================

An operation is supported where the reference supports it at the feature level, its code is
among the operations and every operand of a data type (float, quant8 asymm, quant16, bool8) has
one of the types; INT32 tensors (shapes, axes, biases) and per-channel filters pass. Load one as
``nnapi_ref.drivers.partial:npu13``, and one carrying a broken driver's fault as
``nnapi_ref.drivers.partial:npu13__<fault>`` (``npu13__add_quant8_truncating``).
"""
from __future__ import annotations

from dataclasses import dataclass

from nnapi_ref import hal
from nnapi_ref.drivers import broken
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.types import FeatureLevel, OperandCode as T, OperationCode as Op

# Operand types a partial driver supports or not; the others (INT32 tensors and scalars, per-channel
# filters, subgraphs) go with the operations using them.
DATA_TYPES = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
                        T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_BOOL8})


@dataclass(frozen=True)
class PartialSupport:
    operations: frozenset | None  # None: every operation
    types: frozenset
    feature_level: int

    def supports(self, sg: hal.Subgraph, operation: hal.Operation) -> bool:
        """Whether ``operation`` is within this support (an index out of range, in a model the
        driver validates and rejects anyway, is left to that validation: True here)."""
        if self.operations is not None and operation.type not in self.operations:
            return False
        indexes = list(operation.inputs) + list(operation.outputs)
        if not all(isinstance(k, int) and 0 <= k < len(sg.operands) for k in indexes):
            return True
        return all(sg.operands[k].type in self.types for k in indexes if sg.operands[k].type in DATA_TYPES)


NPU13 = PartialSupport(frozenset({Op.ADD, Op.MUL, Op.SUB, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVERAGE_POOL_2D,
                                  Op.MAX_POOL_2D, Op.RELU, Op.RELU6, Op.SOFTMAX, Op.FULLY_CONNECTED, Op.RESHAPE,
                                  Op.CONCATENATION}),
                       frozenset({T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM}), int(FeatureLevel.LEVEL_4))
QUANT8_ONLY = PartialSupport(None, frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED}),
                             int(FeatureLevel.LEVEL_7))
FLOAT32_LEVEL27 = PartialSupport(None, frozenset({T.TENSOR_FLOAT32}), int(FeatureLevel.LEVEL_1))
SUPPORTS = {"npu13": NPU13, "quant8_only": QUANT8_ONLY, "float32_level27": FLOAT32_LEVEL27}


def make(support: str, fault: str | None = None) -> ReferenceDevice:
    """The reference driver (or broken driver ``fault``) restricted to ``SUPPORTS[support]``."""
    base = ReferenceDevice if fault is None else broken.ALL[fault]
    restriction = SUPPORTS[support]
    label = support if fault is None else f"{support}__{fault}"

    class Partial(base):
        def __init__(self):
            if fault is None:
                super().__init__(name=f"nnts-partial-{label}")
            else:
                super().__init__()
                self.name = f"nnts-partial-{label}"
            self.feature_level = restriction.feature_level

        def get_version_string(self) -> str:
            return f"nnts partial driver ({label})"

        def get_supported_operations(self, model: hal.Model) -> list[bool]:
            flags = super().get_supported_operations(model)
            return [f and restriction.supports(model.main, op) for f, op in zip(flags, model.main.operations)]

        def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
            refused = sorted({_name(op.type) for op in model.main.operations if not restriction.supports(model.main, op)})
            if refused:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{self.name} does not support {refused}")
            return super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)

    Partial.__name__ = Partial.__qualname__ = f"Partial_{label}"
    return Partial()


def _name(code: int) -> str:
    return Op(code).name if code in Op._value2member_map_ else f"operation type {code}"


def npu13() -> ReferenceDevice:
    return make("npu13")


def quant8_only() -> ReferenceDevice:
    return make("quant8_only")


def float32_level27() -> ReferenceDevice:
    return make("float32_level27")


def __getattr__(name: str):
    """``<support>__<fault>``: a factory of the partial driver carrying that broken driver's fault."""
    support, _, fault = name.partition("__")
    if support in SUPPORTS and fault in broken.ALL:
        return lambda: make(support, fault)
    raise AttributeError(name)
