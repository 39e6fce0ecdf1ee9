"""The forms of an operation: each way the registry (:mod:`nnapi_ref.ops`) lets it be written, the
operand types of one of its signatures with each number of trailing optional inputs it may leave
out, and the lowest feature level declaring it. The generator draws forms, coverage counts them."""
from __future__ import annotations

from dataclasses import dataclass

from nnapi_ref import ops
from nnapi_ref.types import FeatureLevel, OperandCode as T, OperationCode as Op

LEVELS = (27, 28, 29, 30, int(max(FeatureLevel)))

@dataclass(frozen=True)
class Form:
    """Operand types of one way to write an operation (``...`` marks an input that repeats)."""

    inputs: tuple
    outputs: tuple

    def __str__(self) -> str:
        # Tensors in capitals without TENSOR_, scalars in lower case.
        short = lambda t: t if t == "..." else T(t).name.replace("QUANT8_", "Q8_").replace("TENSOR_", "") \
            if T(t).name.startswith("TENSOR_") else T(t).name.lower()
        return f"({', '.join(map(short, self.inputs))}) -> ({', '.join(map(short, self.outputs))})"


def _left_out(sig) -> tuple:
    return sig.optional if isinstance(sig.optional, tuple) else tuple(range(sig.optional + 1))


def _form(sig, arity: int) -> Form:
    if sig.repeat is not None:
        inputs = sig.inputs[:sig.repeat + 1] + ("...",) + sig.inputs[sig.repeat + 1:]
    else:
        inputs = sig.inputs[:arity]
    return Form(tuple(inputs), tuple(sig.outputs) + (("...",) if sig.repeat_outputs else ()))


def declared_forms(code: Op, level: int = LEVELS[-1]) -> dict[Form, int]:
    """Every form of ``code`` up to ``level``, with the lowest level declaring it."""
    forms: dict[Form, int] = {}
    for sig in ops.load_all()[code].signatures:
        if sig.level > level:
            continue
        for k in _left_out(sig) if sig.repeat is None else (0,):
            form = _form(sig, len(sig.inputs) - k)
            forms[form] = min(forms.get(form, sig.level), sig.level)
    return forms


def form_of(operation, operands) -> Form | None:
    """The form an operation of a model is written in (None when no signature accepts it)."""
    ins = [operands[k].type for k in operation.inputs]
    outs = [operands[k].type for k in operation.outputs]
    sig = ops.load_all()[operation.type].match(ins, outs)
    return None if sig is None else _form(sig, len(ins))
