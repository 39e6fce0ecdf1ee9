"""An operation's parameters in words, as NNAPI's documentation names them: "CONV_2D (padding
SAME, stride 2x2, fused activation RELU1, layout NHWC)" where an operand list would say "in3:
INT32 1, in4: INT32 2, ...". The names come from each operation's declaration
(``OperationRegistration.parameters``, :meth:`~nnapi_ref.ops.base.OperationRegistration.parameter_names`);
failure messages, reproducer graphs (``nnts graph``) and the conformance report use them.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref import extensions, ops
from nnapi_ref.hal import Model, Operation, Subgraph
from nnapi_ref.types import FuseCode, Lifetime, OperandCode, OperationCode, PaddingCode

SHOWN_ELEMENTS = 8  # a constant tensor parameter with up to this many elements shows its values
# Value names of the parameters every operation names alike (NNAPI's FuseCode, PaddingCode, the
# layout flag, and the LSTMs' activation function, TFLite's TfLiteFusedActivation).
VALUE_NAMES = {
    "fused activation": {int(c): c.name for c in FuseCode},
    "padding": {int(c): c.name for c in PaddingCode},
    "layout": {False: "NHWC", True: "NCHW"},
    "activation": {0: "NONE", 1: "RELU", 3: "RELU6", 4: "TANH", 6: "SIGMOID"},
}
SIDES = ("left", "right", "top", "bottom")


def operation_name(model: Model, code) -> str:
    if extensions.is_extension_type(code):
        name = {e.prefix: e.name for e in model.extension_name_to_prefix}.get(extensions.prefix_of(code), "?")
        return f"{name} operation {extensions.within_extension(code)}"
    try:
        return OperationCode(code).name
    except ValueError:
        return f"operation {code}"


def parameter_names(subgraph: Subgraph, operation: Operation) -> dict[int, str]:
    """The NNAPI names of ``operation``'s parameter inputs by position (none for an extension
    operation or an unknown code)."""
    try:
        declaration = ops.get(OperationCode(operation.type))
    except ValueError:
        return {}
    if declaration is None:
        return {}
    return declaration.parameter_names([subgraph.operands[k].type for k in operation.inputs])


def _value_text(name: str, operand, choices: dict) -> str | None:
    """The text of one parameter's value (None: a value only execution gives)."""
    if operand.lifetime == Lifetime.NO_VALUE:
        return "omitted"
    if operand.lifetime == Lifetime.SUBGRAPH:
        return f"subgraph {operand.value}"
    if operand.lifetime not in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE) or operand.value is None:
        return None
    value = np.asarray(operand.value)
    if value.size == 1 and not operand.dimensions:
        item = value.reshape(-1)[0].item()
        named = choices.get(item, VALUE_NAMES.get(name, {}).get(item))
        if named is not None:
            return str(named)
        if isinstance(item, bool):
            return "true" if item else "false"
        return f"{item:g}" if isinstance(item, float) else str(item)
    if value.size <= SHOWN_ELEMENTS:
        return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value.reshape(-1).tolist()) + "]"
    return f"[{'x'.join(str(d) for d in operand.dimensions)}] tensor"


def parameters(subgraph: Subgraph, operation: Operation) -> list[str]:
    """``operation``'s parameters as "name value" phrases, in input order: a width and height
    pair as one ("stride 2x2", "stride width 2, height 1"), the four explicit paddings as one;
    a parameter given at execution as "name at run time"."""
    names = parameter_names(subgraph, operation)
    try:
        choices = ops.get(OperationCode(operation.type)).choices
    except (ValueError, AttributeError):
        choices = {}
    texts = {k: _value_text(name, subgraph.operands[operation.inputs[k]], choices.get(k, {}))
             for k, name in names.items()}
    phrases, done = [], set()
    for k, name in names.items():
        if k in done:
            continue
        text = texts[k] if texts[k] is not None else "at run time"
        if name == "padding left" and all(names.get(k + i) == f"padding {s}" for i, s in enumerate(SIDES)):
            amounts = [texts[k + i] for i in range(4)]
            done.update(range(k, k + 4))
            if len(set(amounts)) == 1 and amounts[0] is not None:
                phrases.append(f"padding {amounts[0]} on each side")
            else:
                sides = (f"{side} {amount if amount is not None else '?'}" for side, amount in zip(SIDES, amounts))
                phrases.append("padding " + ", ".join(sides))
            continue
        if name.endswith(" width") and names.get(k + 1) == name.removesuffix(" width") + " height":
            what, height = name.removesuffix(" width"), texts[k + 1] if texts[k + 1] is not None else "at run time"
            done.update((k, k + 1))
            phrases.append(f"{what} {text}\u00d7{height}" if text == height else
                           f"{what} width {text}, height {height}")
            continue
        phrases.append(f"{name} {text}")
    return phrases


def describe_operation(model: Model, subgraph: Subgraph, operation: Operation) -> str:
    """"CONV_2D (padding SAME, stride 2x2, fused activation RELU1, layout NHWC)"."""
    said = parameters(subgraph, operation)
    name = operation_name(model, operation.type)
    return f"{name} ({', '.join(said)})" if said else name


def describe_model(model: Model, limit: int = 6) -> str:
    """The main operations of ``model`` with their parameters, "; "-separated (the first
    ``limit``, then how many more)."""
    main = model.main
    said = [describe_operation(model, main, op) for op in main.operations[:limit]]
    more = len(main.operations) - limit
    return "; ".join(said) + (f"; and {more} more operation{'s' if more > 1 else ''}" if more > 0 else "")


def unsupported_operations(model: Model, flags) -> str:
    """The operations of ``model``'s main subgraph that ``flags`` (a driver's supported-operations
    answer) marks unsupported, each with what NNAPI needs of a driver to run it: its operand
    type and the feature level that introduced that use ("CONV_2D on TENSOR_QUANT8_ASYMM_SIGNED,
    feature level 30"), so a skip says why."""
    main, said = model.main, {}
    for operation, ok in zip(main.operations, flags):
        if ok:
            continue
        name = operation_name(model, operation.type)
        in_types = [main.operands[k].type for k in operation.inputs]
        out_types = [main.operands[k].type for k in operation.outputs]
        kind = _type_name(in_types[0] if in_types else out_types[0] if out_types else None)
        try:
            declaration = ops.get(OperationCode(operation.type))
        except ValueError:
            declaration = None
        signature = declaration.match(in_types, out_types) if declaration is not None else None
        level = f", feature level {signature.level}" if signature is not None else ""
        said[f"{name} on {kind}{level}" if kind else name] = None
    return ", ".join(said)


def _type_name(code) -> str | None:
    if code is None:
        return None
    try:
        return OperandCode(code).name
    except ValueError:
        return f"type {code}"
