"""How an operation is declared: its signatures, its shape function and its numpy execution.

Every operation is one :class:`OperationRegistration` subclass (as AOSP's OperationRegistration,
which NN_REGISTER_OPERATION adds to the OperationResolver), registered with :func:`register`::

    @register
    class Floor(OperationRegistration):
        code = OperationCode.FLOOR
        signatures = [Signature(27, [T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32]), ...]

        def infer(self, call):            # validate, then return the output shapes
            return [call.ins[0].shape]

        def execute(self, call):          # numpy arrays in, numpy arrays out
            return [np.floor(call.ins[0].value)]

``infer`` is the operation's *prepare*: it sees concrete input shapes (and the values of
constant inputs), raises ``NnapiError(BAD_DATA, ...)`` (use :func:`nnapi_ref.errors.check`) for
anything NNAPI forbids, and returns one shape per output, or ``None`` for an output whose shape
only execution can tell. The executor calls it at compilation time when every input shape is
known (an input value that is not a constant then raises :class:`ValueUnknown`, which defers
the check to execution) and again at every execution.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Sequence

import numpy as np

from nnapi_ref.errors import NnapiError, check
from nnapi_ref.hal import ChannelQuant
from nnapi_ref.types import OperandCode, OperationCode, ResultCode

T = OperandCode


class ValueUnknown(Exception):
    """An operation asked for an input value that is not known yet (compilation time)."""


class Arg:
    """One input or output operand of an operation call.

    ``shape`` is a tuple (``None`` for a tensor of unknown rank; at compilation time a 0 entry is
    an unknown dimension). ``value`` is the operand's data as a numpy array of its element type
    (a 0-d array for scalars), ``None`` for an omitted optional input.
    """

    __slots__ = ("type", "shape", "scale", "zero_point", "channel_quant", "_value", "omitted")

    def __init__(self, type: OperandCode, shape, scale: float = 0.0, zero_point: int = 0,
                 channel_quant: ChannelQuant | None = None, value: np.ndarray | None = None,
                 omitted: bool = False):
        self.type = type
        self.shape = shape
        self.scale = scale
        self.zero_point = zero_point
        self.channel_quant = channel_quant
        self._value = value
        self.omitted = omitted

    @property
    def value(self) -> np.ndarray | None:
        if self._value is None and not self.omitted:
            raise ValueUnknown()
        return self._value

    @property
    def rank(self) -> int:
        return len(self.shape)

    def scalar(self):
        """The value of a scalar operand as a Python bool, int or float (no scalar is omittable:
        model validation and request checks keep omitted operands out of their positions)."""
        return self.value.item()

    def dequantize(self) -> np.ndarray:
        """The real values of a quantized tensor, as float64 (per-channel aware)."""
        value = self.value.astype(np.float64)
        if self.channel_quant is not None:
            shape = [1] * value.ndim
            shape[self.channel_quant.channel_dim] = -1
            return value * np.asarray(self.channel_quant.scales, np.float64).reshape(shape)
        return (value - self.zero_point) * self.scale

    def __repr__(self) -> str:
        return f"Arg({self.type.name}, {self.shape}, scale={self.scale}, zp={self.zero_point})"


@dataclass
class Call:
    """One call of an operation: its inputs and outputs, and the executor's context.

    ``runner`` runs referenced subgraphs (IF/WHILE); ``relaxed`` says float32 may be computed
    with float16 range and precision. ``constant_inputs`` are the positions of inputs that are
    model constants, and ``cache`` lives as long as the compiled operation: see :meth:`derived`.
    """

    ins: list[Arg]
    outs: list[Arg]
    relaxed: bool = False
    runner: Any = None
    constant_inputs: frozenset = frozenset()
    cache: dict | None = None

    def derived(self, key, positions, compute):
        """``compute()``, remembered for the compiled operation when it depends only on the
        inputs at ``positions`` and they are all constants (prepared weights, multipliers,
        lookup tables); recomputed on every call otherwise."""
        if self.cache is None or not self.constant_inputs.issuperset(positions):
            return compute()
        value = self.cache.get(key)
        if value is None:
            value = self.cache[key] = compute()
        return value


@dataclass(frozen=True)
class Signature:
    """Operand types an operation accepts from feature level ``level`` on.

    ``optional`` trailing inputs may be left out of the operation altogether (a layout flag, say);
    a tuple gives the numbers that may be left out, for optional inputs that come in groups (a
    convolution's dilation factors go together).
    ``repeat`` is the index of an input that may appear one or more times in its place
    (CONCATENATION's tensors); ``repeat_outputs`` lets the single output type repeat (SPLIT).
    ``omittable`` are the positions of inputs that may be present without a value (lifetime
    NO_VALUE in the model, or a model input omitted in the request): the tensors NeuralNetworks.h
    calls optional (LSTM's peephole weights, SQUEEZE's axes...). Model validation rejects an
    omitted operand anywhere else, so operations read every other input without checking.
    """

    level: int
    inputs: tuple[OperandCode, ...]
    outputs: tuple[OperandCode, ...]
    optional: int | tuple[int, ...] = 0
    repeat: int | None = None
    repeat_outputs: bool = False
    omittable: frozenset[int] = frozenset()

    def __init__(self, level, inputs, outputs, optional=0, repeat=None, repeat_outputs=False, omittable=()):
        object.__setattr__(self, "level", level)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "optional", optional)
        object.__setattr__(self, "repeat", repeat)
        object.__setattr__(self, "repeat_outputs", repeat_outputs)
        object.__setattr__(self, "omittable", frozenset(omittable))

    def matches(self, in_types: Sequence[int], out_types: Sequence[int]) -> bool:
        if self.repeat_outputs:
            if not out_types or any(t != self.outputs[0] for t in out_types):
                return False
        elif tuple(out_types) != self.outputs:
            return False
        if self.repeat is not None:
            head, body, tail = self.inputs[:self.repeat], self.inputs[self.repeat], self.inputs[self.repeat + 1:]
            n = len(in_types) - len(head) - len(tail)
            return (n >= 1 and tuple(in_types[:len(head)]) == head
                    and all(t == body for t in in_types[len(head):len(head) + n])
                    and tuple(in_types[len(head) + n:]) == tail)
        n = len(in_types)
        left_out = len(self.inputs) - n
        if not (left_out in self.optional if isinstance(self.optional, tuple) else 0 <= left_out <= self.optional):
            return False
        return tuple(in_types) == self.inputs[:n]


@dataclass(frozen=True)
class WindowInputs:
    """Where a convolution's or pool's scalar inputs are in one padding form (None where it has
    none): ``arity`` counts its inputs without the optional tail (the layout, then the dilation
    factors) or, where the layout is not optional, with it."""

    arity: int
    activation: int
    layout: int
    dilation: int | None = None
    multiplier: int | None = None


class OperationRegistration:
    """Base class of every operation's declaration; see the module docstring. Not
    :class:`nnapi_ref.hal.Operation`, one use of an operation in a model.

    Besides the signatures and the two functions, a declaration states the facts about the
    operation that the suite's generators and checks read, so that one declaration is the whole
    operation; ``code`` and ``signatures`` are the only ones it must give:

    * ``accuracy``: the tier the single-operation tests compare it by, as AOSP's
      TEST_SINGLE_OPERATION assigns it: "strict" (moves data or compares), "medium" (one simple
      computation per element), "relaxed" (complex or accumulating), "conv" (the convolutions);
      :meth:`accuracy_at` where it depends on the feature level.
    * ``incomparable``: why its outputs cannot be compared element by element (no random tests).
    * ``fixed_output_quant``: the (scale, zero point) NNAPI fixes for an output, by its type.
    * ``fused_activation``: the position of the fused activation input of a non-window operation.
    * ``window_inputs``: a convolution's or pool's :class:`WindowInputs`, implicit padding then explicit.
    * ``choices``: what the values of scalar inputs choose ({position: {value: name}}).
    * ``same_when_signed``: False where making its TENSOR_QUANT8_ASYMM operands
      TENSOR_QUANT8_ASYMM_SIGNED (values and zero point shifted by -128) changes its meaning.
    * ``zero_sized_inputs``: the result code an execution fails with when an input tensor has a
      zero dimension, as AOSP's CPU executor fails it before the operation runs: OP_FAILED, its
      OperationResolver's default; BAD_DATA for the operations its executor still switches on
      (``allParametersPresent``). None where the operation takes zero-sized inputs (the 28
      registered with ``allowZeroSizedInput``, and those the executor leaves to their own checks).
    * ``parameters``: the NNAPI names of the inputs that parametrize it ({position: name}, a
      negative position counted from the end; a window operation's pair of such tables,
      implicit padding then explicit: :func:`window_parameters`), so that failures, graphs and
      reports say "stride 2x2, fused activation RELU1" instead of "in4: INT32 2". The fused
      activation's name comes from ``fused_activation``; :meth:`parameter_names` gives the table
      of one use of the operation.
    """

    code: ClassVar[OperationCode]
    signatures: ClassVar[Sequence[Signature]] = ()
    accuracy: ClassVar[str | None] = None
    incomparable: ClassVar[str | None] = None
    fixed_output_quant: ClassVar[dict[OperandCode, tuple[float, int]]] = {}
    fused_activation: ClassVar[int | None] = None
    window_inputs: ClassVar[tuple[WindowInputs, WindowInputs] | None] = None
    choices: ClassVar[dict[int, dict]] = {}
    same_when_signed: ClassVar[bool] = True
    zero_sized_inputs: ClassVar[ResultCode | None] = ResultCode.OP_FAILED
    parameters: ClassVar[dict[int, str] | tuple[dict[int, str], dict[int, str]]] = {}

    @property
    def name(self) -> str:
        return self.code.name

    def match(self, in_types: Sequence[int], out_types: Sequence[int]) -> Signature | None:
        """The lowest-level signature accepting these operand types, or None (remembered per
        operand types: the runtime, the validator, the driver and the executor all ask it of each
        operation, and the signatures never change)."""
        matched = self.__dict__.get("_matched")
        if matched is None:
            matched = self._matched = {}
        try:
            key = (tuple(in_types), tuple(out_types))
            return matched[key]
        except KeyError:
            if len(matched) >= 4096:
                matched.clear()
            best = matched[key] = self._best_signature(in_types, out_types)
            return best
        except TypeError:  # an unhashable operand type (a malformed model)
            return self._best_signature(in_types, out_types)

    def _best_signature(self, in_types: Sequence[int], out_types: Sequence[int]) -> Signature | None:
        best = None
        for sig in self.signatures:
            if sig.matches(in_types, out_types) and (best is None or sig.level < best.level):
                best = sig
        return best

    def parameter_names(self, in_types: Sequence[int]) -> dict[int, str]:
        """The names of the parameter inputs of one use of the operation with these input types,
        by position (the explicit-padding form of a window operation is told, as NNAPI tells it,
        by an INT32 where the implicit form has its layout BOOL)."""
        table = self.parameters
        if self.window_inputs is not None:
            probe = self.window_inputs[0].layout
            table = table[1 if len(in_types) > probe and in_types[probe] == T.INT32 else 0]
        n = len(in_types)
        names = {(k if k >= 0 else n + k): name for k, name in table.items()}
        if self.fused_activation is not None:
            names[self.fused_activation] = "fused activation"
        return {k: name for k, name in sorted(names.items()) if 0 <= k < n}

    def accuracy_at(self, level: int) -> str | None:
        """The accuracy tier at feature ``level``."""
        return self.accuracy

    def check_declared(self, in_dims: list, out_dims: list) -> str | None:
        """What is wrong with the operands' declared dimensions (0: unknown), checked when a
        model is validated, before any shape is known; None when nothing is. Most operations
        leave this to ``infer``."""
        return None

    def infer(self, call: Call) -> list[tuple[int, ...] | None]:
        raise NotImplementedError(self.name)

    def execute(self, call: Call) -> list[np.ndarray]:
        raise NotImplementedError(self.name)


REGISTRY: dict[OperationCode, OperationRegistration] = {}


def register(cls: type[OperationRegistration]) -> type[OperationRegistration]:
    """Class decorator: add one instance of ``cls`` to the registry."""
    if cls.code in REGISTRY:
        raise RuntimeError(f"operation {cls.code.name} registered twice")
    REGISTRY[cls.code] = cls()
    return cls


def signatures(level: int, types: Iterable[OperandCode], inputs, outputs, **kwargs) -> list[Signature]:
    """One signature per type in ``types``: ``inputs``/``outputs`` are lists in which the
    placeholder ``None`` stands for that type. Saves spelling out a family of signatures."""
    out = []
    for t in types:
        out.append(Signature(level, [t if x is None else x for x in inputs],
                             [t if x is None else x for x in outputs], **kwargs))
    return out


def window_parameters(first: int, extras: Sequence[str] = (), dilation: bool = True,
                      implicit_head: dict[int, str] | None = None) -> tuple[dict[int, str], dict[int, str]]:
    """The ``parameters`` of a convolution or pool whose scalars start at input ``first``:
    padding (the implicit scheme, or the four explicit amounts), the strides, ``extras`` (a
    depth multiplier, groups, a filter size), the fused activation, the layout and, where it
    has them, the dilation factors. ``implicit_head``: inputs the implicit form has before its
    scalars (TRANSPOSE_CONV_2D's output shape), which shift them by one."""
    tail = ("stride width", "stride height", *extras, "fused activation", "layout")
    tail += ("dilation width", "dilation height") if dilation else ()
    implicit_first = first + len(implicit_head or {})
    implicit = dict(implicit_head or {}) | {implicit_first: "padding"}
    implicit |= {implicit_first + 1 + k: name for k, name in enumerate(tail)}
    explicit = {first + k: f"padding {side}" for k, side in enumerate(("left", "right", "top", "bottom"))}
    explicit |= {first + 4 + k: name for k, name in enumerate(tail)}
    return implicit, explicit


def fail(message: str) -> NnapiError:
    """The error an operation raises for an input NNAPI forbids (BAD_DATA)."""
    return NnapiError(ResultCode.BAD_DATA, message)


__all__ = ["Arg", "Call", "OperationRegistration", "Signature", "ValueUnknown", "WindowInputs", "REGISTRY", "register",
           "signatures", "window_parameters", "fail", "check", "T", "OperationCode", "np"]
