"""Whole-model validation, shared by the model builder's ``finish()`` and by drivers.

Everything here raises ``NnapiError(BAD_DATA, message)``; a driver turns that into
INVALID_ARGUMENT. Shape checks that need concrete shapes happen in the executor's plan.
"""
from __future__ import annotations

import heapq
import math
import threading
import weakref

import numpy as np

from nnapi_ref import extensions as ext, ops
from nnapi_ref.errors import NnapiError, bad_data, check
from nnapi_ref.hal import Model, Operand, Subgraph
from nnapi_ref.types import (DTYPES, SCALAR_TYPES, ZERO_POINT_RANGE, FeatureLevel, Lifetime, OperandCode as T,
                             OperationCode, ResultCode, type_name)

CONSTANT_LIFETIMES = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
_CONTROL_FLOW = (OperationCode.IF, OperationCode.WHILE)
_LIFETIMES = frozenset(Lifetime) - {Lifetime.POINTER}
# Enum members as module constants: each Lifetime.X / T.X lookup costs a descriptor call, and
# validation runs once per model built or handed to a driver.
_TEMPORARY, _INPUT, _OUTPUT = Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT
_NO_VALUE, _SUBGRAPH_LIFETIME = Lifetime.NO_VALUE, Lifetime.SUBGRAPH
_WRITTEN = (_TEMPORARY, _OUTPUT)  # lifetimes of operands an operation writes
_UNVALUED = frozenset({_TEMPORARY, _INPUT, _OUTPUT})  # lifetimes of operands without a value
_SYMM = (T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM)
_PER_CHANNEL, _TENSOR_INT32, _SUBGRAPH = T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32, T.SUBGRAPH
_OPERATION_CODES = {int(c): c for c in OperationCode}
# Operand types whose scale and zero point must both be 0 (the others are checked one by one).
_UNQUANTIZED = frozenset(DTYPES) - set(ZERO_POINT_RANGE) - set(_SYMM) - {_PER_CHANNEL, _TENSOR_INT32}
_INT = frozenset({int})
_FLT_MAX = float(np.finfo(np.float32).max)  # a scale beyond it has no C float: inf in the NDK


def plain_indexes(indexes, count: int) -> bool:
    """Whether every one of ``indexes`` (a tuple or list) is a plain int in [0, count).

    A fast path before a per-index loop that names the bad one: these checks run in C (map,
    min, max), without a Python-level branch per index, which a coverage-instrumented fuzzer
    pays for on every model it builds."""
    return _INT.issuperset(map(type, indexes)) and (len(indexes) == 0 or
                                                    (min(indexes) >= 0 and max(indexes) < count))


def _plain_dimensions(dimensions) -> bool:
    """Whether ``dimensions`` are all plain ints that fit NNAPI's uint32_t (see plain_indexes)."""
    return plain_indexes(dimensions, 0x100000000)


def operand_type_problem(code, dimensions, scale: float, zero_point: int, channel_quant,
                         channel_quant_pending: bool = False) -> str | None:
    """What breaks the NDK's per-operand-type rules (addOperand, setOperandSymmPerChannelQuantParams),
    or None. ``channel_quant_pending``: a per-channel operand's parameters come later."""
    try:
        known = code in DTYPES
    except TypeError:  # unhashable (a list, say): no operand type
        known = False
    if not known:
        return f"invalid operand type {code}"
    if code in SCALAR_TYPES and len(dimensions):
        return f"scalar type {type_name(code)} must have no dimensions, got {list(dimensions)}"
    if not _plain_dimensions(dimensions):
        for d in dimensions:
            if not isinstance(d, (int, np.integer)) or d < 0:
                return f"dimensions {list(dimensions)} must be non-negative integers"
            if d > 0xFFFFFFFF:
                return f"dimension {d} does not fit NNAPI's uint32_t dimensions"
    if dimensions and math.prod(map(int, dimensions)) * DTYPES[code].itemsize > 0xFFFFFFFF:  # the NDK's limit
        return (f"dimensions {list(dimensions)} of {type_name(code)} take "
                f"{math.prod(map(int, dimensions)) * DTYPES[code].itemsize} bytes, beyond NNAPI's uint32_t sizes")
    if not -_FLT_MAX <= scale <= _FLT_MAX:
        return f"scale {scale} is not a finite float32 (the NDK's scale is a C float)"
    if code in _UNQUANTIZED:
        if scale != 0 or zero_point != 0:
            return f"{type_name(code)} must have scale 0 and zero point 0, got {scale} and {zero_point}"
    elif code in ZERO_POINT_RANGE or code in _SYMM:
        if not scale > 0:
            return f"{type_name(code)} needs a positive scale, got {scale}"
        lo, hi = ZERO_POINT_RANGE.get(code, (0, 0))
        if not lo <= zero_point <= hi:
            return f"{type_name(code)} zero point {zero_point} outside [{lo}, {hi}]"
    elif code == _PER_CHANNEL:
        if scale != 0 or zero_point != 0:
            return f"{type_name(code)} takes its scales from channel quantization; scale and zero point must be 0"
    elif code == _TENSOR_INT32:
        if scale < 0:
            return f"TENSOR_INT32 scale {scale} must not be negative"
        if zero_point != 0:
            return f"TENSOR_INT32 zero point must be 0, got {zero_point}"
    if channel_quant is not None:
        if code != _PER_CHANNEL:
            return f"per-channel quantization parameters on a {type_name(code)} operand"
        dim = channel_quant.channel_dim
        if not 0 <= dim < len(dimensions):
            return f"channel dimension {dim} out of range for rank {len(dimensions)}"
        if len(channel_quant.scales) != dimensions[dim] and dimensions[dim] != 0:
            return f"{len(channel_quant.scales)} channel scales for a channel dimension of {dimensions[dim]}"
        if not all(0 < s <= _FLT_MAX for s in channel_quant.scales):
            return "channel scales must be positive and finite in float32"
    elif code == _PER_CHANNEL and not channel_quant_pending:
        return f"{type_name(code)} operand without per-channel quantization parameters"
    return None


def validate_operand_type(type_code, dimensions, scale: float, zero_point: int, channel_quant,
                          what: str = "operand", channel_quant_pending: bool = False) -> None:
    problem = operand_type_problem(type_code, dimensions, scale, zero_point, channel_quant, channel_quant_pending)
    if problem:
        raise NnapiError(ResultCode.BAD_DATA, f"{what}: {problem}")


def _operand_problem(model: Model, operand: Operand, types: ext.ExtensionTypes, name: str, index: int,
                     types_checked: bool) -> str | None:
    """What is wrong with operand ``index`` of subgraph ``name``, or None (``types_checked``: see
    validate_model)."""
    code = operand.type
    extension = type(code) is not T and ext.is_extension_type(code)  # an OperandCode is no extension's
    if extension:
        problem = ext.operand_problem(types, operand, f"{name} operand {index}")
    elif types_checked:  # all but what the builder let wait: a per-channel operand's parameters
        problem = f"{type_name(code)} operand without per-channel quantization parameters" \
            if code == _PER_CHANNEL and operand.channel_quant is None else None
    else:
        problem = operand_type_problem(code, operand.dimensions, operand.scale, operand.zero_point,
                                       operand.channel_quant)
        if problem is None and operand.extension_data is not None:
            problem = f"extension data on a {type_name(code)} operand"
    if problem:
        return problem
    life = operand.lifetime
    if life in _UNVALUED:  # most operands: what the checks below come to for them
        if operand.value is not None:
            return f"{Lifetime(life).name} operand must not have a value"
        return "a SUBGRAPH operand must have SUBGRAPH lifetime" if code == _SUBGRAPH else None
    if life not in _LIFETIMES:
        return f"invalid lifetime {life}"
    if life in CONSTANT_LIFETIMES:
        value = operand.value
        if value is None:
            return "constant without a value"
        if code != _SUBGRAPH and not extension:
            if 0 in operand.dimensions and code not in SCALAR_TYPES:
                return f"constant with unspecified dimensions {list(operand.dimensions)}"
            count = math.prod(operand.dimensions)
            size = value.size if isinstance(value, np.ndarray) else np.size(value)
            if size != count:
                return f"constant has {size} values for dimensions {list(operand.dimensions)}"
    elif life == _SUBGRAPH_LIFETIME:
        if code != _SUBGRAPH:
            return f"SUBGRAPH lifetime on a {type_name(code)} operand"
        if not (isinstance(operand.value, (int, np.integer)) and 0 <= operand.value < len(model.referenced)):
            return f"reference to subgraph {operand.value} of {len(model.referenced)}"
    elif operand.value is not None:
        return f"{Lifetime(life).name} operand must not have a value"
    if code == _SUBGRAPH and life != _SUBGRAPH_LIFETIME:
        return "a SUBGRAPH operand must have SUBGRAPH lifetime"
    return None


def omitted_input_message(where: str, code: OperationCode, position: int, operand: int) -> str:
    return (f"{where}: input {position} of {code.name} (operand {operand}) is omitted (has no value), "
            f"and {code.name} requires a value there")


def _operation_code(value) -> OperationCode | None:
    """The OperationCode of a built-in operation type (a dict lookup, not an enum call), else None."""
    try:
        return _OPERATION_CODES.get(value)
    except TypeError:  # unhashable: not a type code
        return None


def validate_subgraph(model: Model, sg: Subgraph, name: str, types: ext.ExtensionTypes | None = None,
                      operand_types_checked: bool = False) -> int:
    """Validate one subgraph; return the feature level its operations need."""
    types = types if types is not None else ext.ExtensionTypes(model, (), strict=False)
    operands = sg.operands
    n = len(operands)
    for i, operand in enumerate(operands):
        problem = _operand_problem(model, operand, types, name, i, operand_types_checked)
        if problem:
            raise bad_data(f"{name} operand {i}: {problem}")
    lifetimes = [o.lifetime for o in operands]
    for role, indexes, life in (("input", sg.input_indexes, _INPUT), ("output", sg.output_indexes, _OUTPUT)):
        if len(set(indexes)) != len(indexes):
            raise bad_data(f"{name}: a {role} operand is listed twice")
        for k in indexes:
            if not 0 <= k < n:
                raise bad_data(f"{name}: {role} index {k} out of range ({n} operands)")
            if lifetimes[k] != life:
                raise bad_data(f"{name}: {role} operand {k} has lifetime {Lifetime(lifetimes[k]).name}")
        if lifetimes.count(life) != len(indexes):  # the listed ones are distinct and have it: another has it too
            listed = set(indexes)
            for i, lifetime in enumerate(lifetimes):
                if lifetime == life and i not in listed:
                    raise bad_data(f"{name}: operand {i} is a {role} but not listed as one")

    writers = [0] * n
    level = FeatureLevel.LEVEL_1
    registry = ops.load_all()
    for j, operation in enumerate(sg.operations):
        code = _operation_code(operation.type)
        if code is None:
            if isinstance(operation.type, (int, np.integer)) and ext.is_extension_type(operation.type):
                _check_extension_operation(sg, operation, types, writers, f"{name} operation {j}")
                continue
            try:
                code = OperationCode(operation.type)
            except ValueError:
                raise bad_data(f"{name} operation {j}: invalid operation type {operation.type}") from None
        inputs, outputs = operation.inputs, operation.outputs
        if not plain_indexes(inputs + outputs, n):
            for k in inputs + outputs:
                if not (isinstance(k, (int, np.integer)) and 0 <= k < n):
                    raise bad_data(f"{name} operation {j} ({code.name}): operand index {k} out of range "
                                   f"({n} operands)")
        for k in outputs:
            if lifetimes[k] not in _WRITTEN:
                raise bad_data(f"{name} operation {j} ({code.name}): output operand {k} is a "
                               f"{Lifetime(lifetimes[k]).name}")
            writers[k] += 1
        impl = registry.get(code)
        if impl is None:
            continue  # not implemented by the reference: its signature can't be checked; drivers report it unsupported
        in_types = [operands[k].type for k in inputs]
        out_types = [operands[k].type for k in outputs]
        sig = impl.match(in_types, out_types)
        if sig is None:
            raise bad_data(f"{name} operation {j}: {code.name} does not accept inputs "
                           f"({', '.join(type_name(t) for t in in_types)}) and outputs "
                           f"({', '.join(type_name(t) for t in out_types)})")
        if _NO_VALUE in map(lifetimes.__getitem__, inputs):
            for position, k in enumerate(inputs):
                if lifetimes[k] == _NO_VALUE and position not in sig.omittable:
                    raise bad_data(omitted_input_message(f"{name} operation {j}", code, position, k))
        problem = impl.check_declared([operands[k].dimensions for k in inputs],
                                      [operands[k].dimensions for k in outputs])
        if problem is not None:
            raise bad_data(f"{name} operation {j} ({code.name}): {problem}")
        if sig.level > level:
            level = sig.level
        if code in _CONTROL_FLOW:
            level = max(level, impl.check_references(model, sg, operation))
    # Only operands of _WRITTEN lifetimes have writers (checked above): each has one when the
    # writes are at most one each and as many as those operands (checked in C; the loop names one)
    if max(writers, default=0) > 1 or sum(writers) != lifetimes.count(_TEMPORARY) + lifetimes.count(_OUTPUT):
        for k, lifetime in enumerate(lifetimes):
            if lifetime in _WRITTEN and writers[k] != 1:
                raise bad_data(f"{name}: operand {k} is written by {writers[k]} operations, must be exactly 1")
    topological_order(sg, name)
    return level


def _check_extension_operation(sg: Subgraph, operation, types: ext.ExtensionTypes, writers: list[int],
                               where: str) -> None:
    """What the runtime can check of an extension operation: its prefix is the model's and its
    operands exist; its signature is the driver's to check."""
    types.name(operation.type, where)
    n = len(sg.operands)
    for k in tuple(operation.inputs) + tuple(operation.outputs):
        if not (isinstance(k, (int, np.integer)) and 0 <= k < n):
            raise bad_data(f"{where} (extension operation {operation.type}): operand index {k} out of range "
                           f"({n} operands)")
    for k in operation.outputs:
        if sg.operands[k].lifetime not in (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT):
            raise bad_data(f"{where}: output operand {k} is a {Lifetime(sg.operands[k].lifetime).name}")
        writers[k] += 1


def topological_order(sg: Subgraph, name: str = "model") -> list[int]:
    """Operation indexes in an order where each runs after the writers of its inputs: always the
    lowest-indexed ready operation next, so a subgraph already in order keeps its order."""
    ready = {k for k, o in enumerate(sg.operands) if o.lifetime not in _WRITTEN}
    if _in_order(sg, ready):  # the usual case (the runtime hands drivers sorted models): no sorting
        return list(range(len(sg.operations)))
    writer_of = {k: j for j, op in enumerate(sg.operations) for k in op.outputs}
    waiting = {j: sum(1 for k in set(op.inputs) if k not in ready) for j, op in enumerate(sg.operations)}
    consumers: dict[int, list[int]] = {}
    for j, op in enumerate(sg.operations):
        for k in set(op.inputs):
            if k not in ready:
                consumers.setdefault(k, []).append(j)
    heap = [j for j, w in waiting.items() if w == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        j = heapq.heappop(heap)
        order.append(j)
        for k in sg.operations[j].outputs:
            for consumer in consumers.get(k, ()):
                waiting[consumer] -= 1
                if waiting[consumer] == 0:
                    heapq.heappush(heap, consumer)
    if len(order) != len(sg.operations):
        missing = sorted(set(range(len(sg.operations))) - set(order))
        unwritten = sorted({k for j in missing for k in sg.operations[j].inputs if k not in ready and k not in writer_of})
        detail = f"operands {unwritten} are never written" if unwritten else "the operations form a cycle"
        raise NnapiError(ResultCode.BAD_DATA, f"{name}: operations {missing} can never run: {detail}")
    return order


def _in_order(sg: Subgraph, ready: set[int]) -> bool:
    """Whether each operation reads only operands in ``ready`` or written by an earlier one."""
    written = set(ready)
    for op in sg.operations:
        if not written.issuperset(op.inputs):
            return False
        written.update(op.outputs)
    return True


def validate_model(model: Model, extensions=(), strict: bool = False, operand_types_checked: bool = False) -> int:
    """Validate the main subgraph and every referenced one; return the model's feature level.

    ``extensions`` are the extensions whose operand types can be checked (a driver's own, or
    every device's for the runtime); ``strict``: an operand type of any other extension is
    invalid (a driver preparing the model), else it passes unchecked (the supported-operations
    query, which says false for it). ``operand_types_checked``: the model builder checked each
    built-in operand's type, dimensions and quantization as it was added (addOperand,
    setOperandSymmPerChannelQuantParams): they are not checked again, except that a per-channel
    operand got its parameters."""
    check(len(model.main.operations) > 0, "model has no operations")
    check(len(model.main.output_indexes) > 0, "model has no outputs")
    types = ext.ExtensionTypes(model, extensions, strict)
    level = validate_subgraph(model, model.main, "main", types, operand_types_checked)
    for k, sg in enumerate(model.referenced):
        level = max(level, validate_subgraph(model, sg, f"subgraph {k}", types, operand_types_checked))
    _check_no_recursion(model)
    return int(level)


# HAL models the runtime validated (ModelBuilder::finish) and hands to its drivers unchanged, by
# identity: id -> (weak reference, feature level). A driver need not validate such a model again.
_runtime_validated: dict[int, tuple[weakref.ref, int]] = {}
_runtime_validated_lock = threading.Lock()


def note_runtime_validated(model: Model, level: int) -> None:
    """``model`` (built by the runtime, never changed after) passed ``validate_model`` at ``level``."""
    key = id(model)

    def forget(_ref, key=key):
        with _runtime_validated_lock:
            entry = _runtime_validated.get(key)
            if entry is not None and entry[0] is _ref:
                del _runtime_validated[key]

    with _runtime_validated_lock:
        _runtime_validated[key] = (weakref.ref(model, forget), level)


def runtime_validated_level(model: Model) -> int | None:
    """The feature level of a model the runtime validated and that uses no extension (for which a
    driver's check of its own extensions could differ); None for any other model."""
    entry = _runtime_validated.get(id(model))
    if entry is None or entry[0]() is not model or model.extension_name_to_prefix:
        return None
    return entry[1]


def _check_no_recursion(model: Model) -> None:
    """A subgraph must not (indirectly) reference itself."""
    if not model.referenced:
        return

    def refs(sg: Subgraph) -> set[int]:
        return {o.value for o in sg.operands if o.lifetime == _SUBGRAPH_LIFETIME}

    edges = [refs(sg) for sg in model.referenced]
    state = [0] * len(edges)  # 0 unseen, 1 on the stack, 2 done

    def visit(k: int) -> None:
        check(state[k] != 1, f"subgraph {k} references itself")
        if state[k] == 0:
            state[k] = 1
            for r in edges[k]:
                visit(r)
            state[k] = 2

    for k in refs(model.main):
        visit(k)
