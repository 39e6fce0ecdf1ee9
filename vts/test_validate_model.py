"""VTS model validation (AOSP's ValidateModel): a valid test model is mutated into an invalid one
in every way AOSP's VTS mutates models, and the driver must reject each mutant with
INVALID_ARGUMENT from both get_supported_operations and prepare_model (and return no prepared
model). Every mutant is made on a fresh copy of the model; the test models are never touched.

The models: the first ``NNTS_VTS_MUTATION_SUBSET`` models (default 1; ``all``; ``0`` for none) of
each test-vector file, models that must fail and models of more than
``NNTS_VTS_MUTATION_MAX_OPERANDS`` operands (default 100; ``all``) excluded. One test per model and kind of mutation.
Mutations AOSP knows to yield valid models are skipped the way AOSP skips them (see each
``_skip_*`` function). Mutants invalid only by an operation's signature are skipped as unsupported
for models the driver does not fully support (``SIGNATURE_KINDS``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.hal import ChannelQuant, ErrorStatus, HalError, Operand, Operation
from nnapi_ref.types import DTYPES, Lifetime, OperandCode as T, OperationCode as Op, PreferenceCode, PriorityCode
from nnts.runners import ordering
from nnts.vts.support import case_marks, clone_model, first_per_file, mark_node, model_cases

SCALARS = (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL)
ALL_TYPES = sorted({int(c) for c in T})
WRITTEN = (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT)
CONSTANT = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)

# A mutation: (description, function turning a fresh copy of the model into the mutant; it
# returns the preference and priority to prepare with).
Mutate = Callable[[hal.Model], tuple[int, int]]
DEFAULTS = (PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM)


def consumers(sg: hal.Subgraph) -> list[int]:
    counts = [0] * len(sg.operands)
    for op in sg.operations:
        for k in op.inputs:
            counts[k] += 1
    return counts


def _known_size(o: Operand) -> int | None:
    """Elements of an operand of known shape; None when unknown."""
    if o.type in SCALARS:
        return 1
    if not o.dimensions or 0 in o.dimensions or o.type not in DTYPES:
        return None
    return int(np.prod(o.dimensions))


def _become_constant(sg: hal.Subgraph, k: int, lifetime=Lifetime.CONSTANT_COPY) -> None:
    o = sg.operands[k]
    sg.operands[k] = dataclasses.replace(o, lifetime=lifetime, value=np.zeros(_known_size(o), DTYPES[o.type]))


def _set_lifetime(sg: hal.Subgraph, k: int, lifetime: Lifetime) -> None:
    if lifetime in CONSTANT:
        _become_constant(sg, k, lifetime)
    else:
        sg.operands[k] = dataclasses.replace(sg.operands[k], lifetime=lifetime, value=None)


def _new_operand(sg: hal.Subgraph, operand: Operand) -> int:
    sg.operands.append(operand)
    return len(sg.operands) - 1


def _as_temporary(o: Operand) -> Operand:
    return dataclasses.replace(o, lifetime=Lifetime.TEMPORARY_VARIABLE, value=None)


def _replace_io(op: Operation, inputs=None, outputs=None) -> Operation:
    return Operation(op.type, tuple(op.inputs if inputs is None else inputs),
                     tuple(op.outputs if outputs is None else outputs))


# -- the mutations, kind by kind -------------------------------------------------------------------

def execution_order(model: hal.Model) -> Iterator[tuple[str, Mutate]]:
    """An operation moved before the writer of its input, or after a reader of its output."""
    sg = model.main
    n_consumers = consumers(sg)
    for j, op in enumerate(sg.operations):
        if any(sg.operands[k].lifetime in WRITTEN for k in op.inputs):
            def to_front(m, j=j):
                ops = m.main.operations
                ops.insert(0, ops.pop(j))
                return DEFAULTS
            yield f"operation {j} (a reader) moved first", to_front
        if any(n_consumers[k] for k in op.outputs):
            def to_back(m, j=j):
                ops = m.main.operations
                ops.append(ops.pop(j))
                return DEFAULTS
            yield f"operation {j} (a writer) moved last", to_back


def operand_type(model):
    for k in range(len(model.main.operands)):
        for bad in (-1, max(ALL_TYPES) + 1):
            def mutate(m, k=k, bad=bad):
                m.main.operands[k] = dataclasses.replace(m.main.operands[k], type=bad)
                return DEFAULTS
            yield f"operand {k} type set to {bad}", mutate


def operand_rank(model):
    for k, o in enumerate(model.main.operands):
        if o.type in SCALARS:
            def mutate(m, k=k):
                m.main.operands[k] = dataclasses.replace(m.main.operands[k], dimensions=(0,))
                return DEFAULTS
            yield f"scalar operand {k} given rank 1", mutate


def _invalid_scale(code) -> float:
    if code in (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32,
                T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.SUBGRAPH):
        return 1.0
    if code == T.TENSOR_INT32:
        return -1.0
    return 0.0


def operand_scale(model):
    for k, o in enumerate(model.main.operands):
        scale = _invalid_scale(o.type)

        def mutate(m, k=k, scale=scale):
            m.main.operands[k] = dataclasses.replace(m.main.operands[k], scale=scale)
            return DEFAULTS
        yield f"operand {k} scale set to {scale}", mutate


def _invalid_zero_points(code) -> list[int]:
    table = {T.TENSOR_QUANT8_ASYMM: [-1, 256], T.TENSOR_QUANT8_SYMM: [-129, -1, 1, 128],
             T.TENSOR_QUANT16_ASYMM: [-1, 65536], T.TENSOR_QUANT16_SYMM: [-32769, -1, 1, 32768],
             T.TENSOR_QUANT8_ASYMM_SIGNED: [-129, 128]}
    return table.get(code, [1])


def operand_zero_point(model):
    for k, o in enumerate(model.main.operands):
        for zp in _invalid_zero_points(o.type):
            def mutate(m, k=k, zp=zp):
                m.main.operands[k] = dataclasses.replace(m.main.operands[k], zero_point=zp)
                return DEFAULTS
            yield f"operand {k} zero point set to {zp}", mutate


def _invalid_lifetimes(o: Operand) -> list[Lifetime]:
    # NO_VALUE and SUBGRAPH operands: whether the operand is written is unknown, so AOSP skips them.
    if o.lifetime in WRITTEN:
        out = [Lifetime.SUBGRAPH_INPUT, Lifetime.CONSTANT_COPY]
    elif o.lifetime in CONSTANT + (Lifetime.SUBGRAPH_INPUT,):
        out = [Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT]
    else:
        out = []
    if _known_size(o) is None and Lifetime.CONSTANT_COPY in out:
        out.remove(Lifetime.CONSTANT_COPY)  # a constant needs a known size
    return out


def operand_lifetime(model):
    """Whether the operand has a writer changes: a written operand becomes an input or a
    constant, an input or constant becomes written (without a writer)."""
    for k, o in enumerate(model.main.operands):
        for life in _invalid_lifetimes(o):
            def mutate(m, k=k, life=life):
                sg = m.main
                sg.input_indexes = tuple(i for i in sg.input_indexes if i != k)
                sg.output_indexes = tuple(i for i in sg.output_indexes if i != k)
                _set_lifetime(sg, k, life)
                if life == Lifetime.SUBGRAPH_INPUT:
                    sg.input_indexes += (k,)
                elif life == Lifetime.SUBGRAPH_OUTPUT:
                    sg.output_indexes += (k,)
                return DEFAULTS
            yield f"operand {k} lifetime {Lifetime(o.lifetime).name} -> {life.name}", mutate


def _changed_role(o: Operand) -> Lifetime | None:
    if o.lifetime in CONSTANT:
        return Lifetime.SUBGRAPH_INPUT
    if o.lifetime == Lifetime.SUBGRAPH_INPUT:
        return Lifetime.CONSTANT_COPY if _known_size(o) is not None else None
    if o.lifetime == Lifetime.SUBGRAPH_OUTPUT:
        return Lifetime.TEMPORARY_VARIABLE
    if o.lifetime == Lifetime.TEMPORARY_VARIABLE:
        return Lifetime.SUBGRAPH_OUTPUT
    return None


def operand_input_output(model):
    """Whether the operand is a model input or output changes, but the model's input and output
    lists do not."""
    for k, o in enumerate(model.main.operands):
        life = _changed_role(o)
        if life is None:
            continue

        def mutate(m, k=k, life=life):
            _set_lifetime(m.main, k, life)
            return DEFAULTS
        yield f"operand {k} lifetime {Lifetime(o.lifetime).name} -> {life.name}, lists unchanged", mutate


def operand_add_writer(model):
    """A copy of an operation appended that writes one of its outputs a second time."""
    for j, op in enumerate(model.main.operations):
        for n, k in enumerate(op.outputs):
            def mutate(m, j=j, n=n):
                sg = m.main
                original = sg.operations[j]
                outputs = [k if i == n else _new_operand(sg, _as_temporary(sg.operands[k]))
                           for i, k in enumerate(original.outputs)]
                sg.operations.append(_replace_io(original, outputs=outputs))
                return DEFAULTS
            yield f"operation {j} duplicated to write operand {k} twice", mutate


def _mutated_operand(o: Operand, code: int) -> Operand:
    """The operand changed to type ``code`` with otherwise plausible parameters (as AOSP)."""
    new = dataclasses.replace(o, type=code)
    dims = tuple(o.dimensions) or (1,)
    if code in SCALARS:
        new = dataclasses.replace(new, dimensions=(), scale=0.0, zero_point=0)
    elif code in (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        new = dataclasses.replace(new, dimensions=dims, scale=0.0, zero_point=0)
    elif code == T.TENSOR_INT32:
        new = dataclasses.replace(new, dimensions=dims, zero_point=0)
    elif code in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM):
        new = dataclasses.replace(new, dimensions=dims, scale=o.scale if o.scale != 0 else 1.0)
    elif code == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        channels = o.dimensions[0] if o.dimensions else 0
        new = dataclasses.replace(new, dimensions=dims, scale=0.0, zero_point=0,
                                  channel_quant=ChannelQuant((1.0,) * channels, 0))
    if isinstance(o.value, np.ndarray) and code in DTYPES and code != T.SUBGRAPH:
        with np.errstate(all="ignore"):
            new.value = o.value.astype(DTYPES[code])  # same number of elements, the new element type
    return new


def _skip_operation_operand_type(model: hal.Model, k: int, code: int) -> bool:
    """AOSP's exclusions: operands whose operations accept several types there."""
    sg = model.main
    if code == sg.operands[k].type:
        return True
    floats = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)
    for op in sg.operations:
        first_in = op.inputs[0] if op.inputs else None
        first_out = op.outputs[0] if op.outputs else None
        if op.type == Op.LSH_PROJECTION and len(op.inputs) > 1 and k == op.inputs[1]:
            return True  # its second argument may have any type
        if op.type in (Op.CAST, Op.ARGMAX, Op.ARGMIN) and code in floats + (
                T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
            return True  # any of these types in and (CAST) out
        if op.type == Op.QUANTIZE and ((k == first_in and code in floats) or (
                k == first_out and code in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED))):
            return True
        if op.type == Op.RANDOM_MULTINOMIAL and k == first_in and code in floats:
            return True
        if op.type == Op.DEQUANTIZE and ((k == first_in and code in (
                T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                T.TENSOR_QUANT8_SYMM_PER_CHANNEL)) or (k == first_out and code in floats)):
            return True
        if op.type in (Op.TRANSPOSE_CONV_2D, Op.GROUPED_CONV_2D, Op.DEPTHWISE_CONV_2D, Op.CONV_2D) and \
                len(op.inputs) > 1 and k == op.inputs[1] and \
                code in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL):
            return True  # filters: per-tensor or per-channel quantized
        if op.type == Op.AXIS_ALIGNED_BBOX_TRANSFORM and len(op.inputs) > 1 and k == op.inputs[1] and \
                code in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
            return True
        if op.type == Op.RANK and k == first_in and code not in SCALARS + (T.SUBGRAPH,):
            return True  # RANK takes any tensor
    return False


def _reinterpreted_conv(model: hal.Model, k: int, code: int) -> bool:
    """An explicit-padding CONV_2D / DEPTHWISE_CONV_2D whose first stride becomes BOOL reads as the
    implicit-padding form with layout and dilations: a valid model. (AOSP's mutant is invalid only
    because the constant's byte length no longer fits the type; these models carry values, not
    byte ranges.)"""
    if code != T.BOOL:
        return False
    for op in model.main.operations:
        if (op.type == Op.CONV_2D and len(op.inputs) == 10 and op.inputs[7] == k) or \
                (op.type == Op.DEPTHWISE_CONV_2D and len(op.inputs) == 11 and op.inputs[8] == k):
            return True
    return False


def operation_operand_type(model):
    for k in range(len(model.main.operands)):
        for code in ALL_TYPES:
            if _skip_operation_operand_type(model, k, code) or _reinterpreted_conv(model, k, code):
                continue

            def mutate(m, k=k, code=code):
                m.main.operands[k] = _mutated_operand(m.main.operands[k], code)
                return DEFAULTS
            yield f"operand {k} set to type {T(code).name}", mutate


def operation_type(model):
    for j in range(len(model.main.operations)):
        for bad in (-1, max(int(c) for c in Op) + 1):
            def mutate(m, j=j, bad=bad):
                op = m.main.operations[j]
                m.main.operations[j] = Operation(bad, op.inputs, op.outputs)
                return DEFAULTS
            yield f"operation {j} type set to {bad}", mutate


def _operand_index_out_of_range(model, side: str):
    """Each operation's ``side`` ("inputs" or "outputs") index in turn set to one past the last operand."""
    n = len(model.main.operands)
    for j, op in enumerate(model.main.operations):
        for i in range(len(getattr(op, side))):
            def mutate(m, j=j, i=i):
                op = m.main.operations[j]
                indexes = getattr(op, side)
                m.main.operations[j] = _replace_io(op, **{side: indexes[:i] + (n,) + indexes[i + 1:]})
                return DEFAULTS
            yield f"operation {j} {side[:-1]} {i} set to operand {n} (out of range)", mutate


def operation_input_index(model):
    return _operand_index_out_of_range(model, "inputs")


def operation_output_index(model):
    return _operand_index_out_of_range(model, "outputs")


def operation_remove_write(model):
    """An operation writes a new operand instead of one that others read, which is then never written."""
    n_consumers = consumers(model.main)
    for j, op in enumerate(model.main.operations):
        for i, k in enumerate(op.outputs):
            if not n_consumers[k]:
                continue

            def mutate(m, j=j, i=i, k=k):
                sg = m.main
                op = sg.operations[j]
                new = _new_operand(sg, _as_temporary(sg.operands[k]))
                sg.operations[j] = _replace_io(op, outputs=op.outputs[:i] + (new,) + op.outputs[i + 1:])
                return DEFAULTS
            yield f"operation {j} no longer writes operand {k}", mutate


def _skip_remove_operand(model: hal.Model, k: int, n_consumers: list[int]) -> bool:
    if not n_consumers[k]:
        return True  # removing an unused operand changes nothing
    for op in model.main.operations:
        # Unlike AOSP's (whose index renumbering leaves stale indexes), this removal renumbers
        # correctly, so dropping an operand that is an optional or variable-length input leaves a
        # valid operation: skip exactly what AOSP's remove-operation-input test skips.
        if any(_skip_remove_operation_input(op, i) for i, x in enumerate(op.inputs) if x == k):
            return True
        # SPLIT's outputs are not checked at preparation; the sequence RNN/LSTM operations have a
        # variable number of outputs.
        if op.type in (Op.SPLIT, Op.UNIDIRECTIONAL_SEQUENCE_LSTM, Op.UNIDIRECTIONAL_SEQUENCE_RNN,
                       Op.BIDIRECTIONAL_SEQUENCE_LSTM, Op.BIDIRECTIONAL_SEQUENCE_RNN) and k in op.outputs:
            return True
    return False


def remove_operand(model):
    n_consumers = consumers(model.main)
    for k in range(len(model.main.operands)):
        if _skip_remove_operand(model, k, n_consumers):
            continue

        def mutate(m, k=k):
            sg = m.main

            def fix(indexes):
                return tuple(i - 1 if i > k else i for i in indexes if i != k)
            del sg.operands[k]
            sg.operations[:] = [_replace_io(op, fix(op.inputs), fix(op.outputs)) for op in sg.operations]
            sg.input_indexes, sg.output_indexes = fix(sg.input_indexes), fix(sg.output_indexes)
            return DEFAULTS
        yield f"operand {k} removed", mutate


def remove_operation(model):
    for j in range(len(model.main.operations)):
        def mutate(m, j=j):
            del m.main.operations[j]
            return DEFAULTS
        yield f"operation {j} removed", mutate


def _skip_remove_operation_input(op: Operation, i: int) -> bool:
    """AOSP's exclusions: trailing optional inputs (layout, align corners, axis) and the
    variable-length inputs of CONCATENATION and PACK."""
    n = len(op.inputs)
    t = op.type
    return ((t == Op.CONCATENATION and n > 2 and i != n - 1) or
            (t == Op.DEPTHWISE_CONV_2D and ((n == 12 and i == 11) or (n == 9 and i == 8))) or
            (t in (Op.CONV_2D, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D) and
             ((n == 11 and i == 10) or (n == 8 and i == 7))) or
            (t == Op.RESIZE_BILINEAR and n >= 4 and i >= 3) or
            (t == Op.RESIZE_NEAREST_NEIGHBOR and n >= 5 and i >= 3) or
            (t in (Op.SPACE_TO_DEPTH, Op.DEPTH_TO_SPACE, Op.BATCH_TO_SPACE_ND) and n == 3 and i == 2) or
            (t == Op.SPACE_TO_BATCH_ND and n == 4 and i == 3) or
            (t == Op.L2_NORMALIZATION and n == 2 and i == 1) or
            (t == Op.LOCAL_RESPONSE_NORMALIZATION and n == 6 and i == 5) or
            (t == Op.SOFTMAX and n == 3 and i == 2) or
            (t == Op.PACK and n > 2 and i != 0))


def remove_operation_input(model):
    for j, op in enumerate(model.main.operations):
        for i in range(len(op.inputs)):
            if _skip_remove_operation_input(op, i):
                continue

            def mutate(m, j=j, i=i):
                op = m.main.operations[j]
                m.main.operations[j] = _replace_io(op, inputs=op.inputs[:i] + op.inputs[i + 1:])
                return DEFAULTS
            yield f"operation {j} input {i} removed", mutate


def remove_operation_output(model):
    for j, op in enumerate(model.main.operations):
        for i in range(len(op.outputs)):
            def mutate(m, j=j, i=i):
                op = m.main.operations[j]
                m.main.operations[j] = _replace_io(op, outputs=op.outputs[:i] + op.outputs[i + 1:])
                return DEFAULTS
            yield f"operation {j} output {i} removed", mutate


def _skip_add_operation_input(op: Operation) -> bool:
    """AOSP's exclusions: operations taking an optional INT32 (axis, layout) next."""
    n = len(op.inputs)
    return ((op.type == Op.L2_NORMALIZATION and n == 1) or (op.type == Op.LOCAL_RESPONSE_NORMALIZATION and n == 5)
            or (op.type == Op.SOFTMAX and n == 2) or (op.type == Op.RESIZE_BILINEAR and n < 6)
            or (op.type == Op.RESIZE_NEAREST_NEIGHBOR and n < 6))


def _int32_operand(lifetime: Lifetime) -> Operand:
    return Operand(T.INT32, (), 0.0, 0, lifetime)


def add_operation_input(model):
    for j, op in enumerate(model.main.operations):
        if _skip_add_operation_input(op):
            continue

        def mutate(m, j=j):
            sg = m.main
            k = _new_operand(sg, _int32_operand(Lifetime.SUBGRAPH_INPUT))
            sg.operations[j] = _replace_io(sg.operations[j], inputs=sg.operations[j].inputs + (k,))
            sg.input_indexes += (k,)
            return DEFAULTS
        yield f"operation {j} given an extra INT32 input", mutate


def add_operation_output(model):
    for j in range(len(model.main.operations)):
        def mutate(m, j=j):
            sg = m.main
            k = _new_operand(sg, _int32_operand(Lifetime.SUBGRAPH_OUTPUT))
            sg.operations[j] = _replace_io(sg.operations[j], outputs=sg.operations[j].outputs + (k,))
            sg.output_indexes += (k,)
            return DEFAULTS
        yield f"operation {j} given an extra INT32 output", mutate


def execution_preference(model):
    for bad in (PreferenceCode.LOW_POWER - 1, PreferenceCode.SUSTAINED_SPEED + 1):
        yield f"preference {bad}", lambda m, bad=bad: (bad, PriorityCode.MEDIUM)


def execution_priority(model):
    for bad in (PriorityCode.LOW - 1, PriorityCode.HIGH + 1):
        yield f"priority {bad}", lambda m, bad=bad: (PreferenceCode.FAST_SINGLE_ANSWER, bad)


KINDS = {f.__name__: f for f in (
    execution_order, operand_type, operand_rank, operand_scale, operand_zero_point, operand_lifetime,
    operand_input_output, operand_add_writer, operation_operand_type, operation_type, operation_input_index,
    operation_output_index, operation_remove_write, remove_operand, remove_operation, remove_operation_input,
    remove_operation_output, add_operation_input, add_operation_output, execution_preference, execution_priority)}


# -- the tests -----------------------------------------------------------------------------------

@dataclass
class MutationCase:
    base: object
    kind: str

    @property
    def operation(self):
        return self.base.operation

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def id(self) -> str:
        return f"{self.operation}-{self.dtype}-{self.base.test.name}-{self.kind}"


def pytest_generate_tests(metafunc):
    if "mutation_case" not in metafunc.fixturenames:
        return
    # Mutations grow with the square of a model's size (every operand, every type, each validating
    # the whole model): big models (mobilenet) are left out unless NNTS_VTS_MUTATION_MAX_OPERANDS
    # says otherwise ("all" for no limit).
    sizes = metafunc.config.nnts_vts
    limit = sizes.mutation_max_operands
    cases = [c for c in model_cases(metafunc.config) if not c.test.expect_failure
             and (limit is None or len(c.test.model.main.operands) <= limit)]
    params = []
    for c in first_per_file(cases, sizes.mutation_subset):
        for kind, mutations in KINDS.items():
            if next(iter(mutations(c.test.model)), None) is None:
                continue  # no mutation of this kind applies to this model
            mc = MutationCase(c, kind)
            params.append(pytest.param(mc, id=mc.id, marks=case_marks(c)))
    metafunc.parametrize("mutation_case", ordering.first_pass_params(metafunc, params))


def _valid_settings(preference, priority) -> bool:
    return preference in set(PreferenceCode) and priority in (PriorityCode.LOW, PriorityCode.MEDIUM, PriorityCode.HIGH)


def ask(driver, calls: Iterable[tuple]) -> list:
    """The driver's answer to each call, ``(model,)`` for get_supported_operations or ``(model,
    preference, priority)`` for prepare_model (a value, or the exception raised): all sent
    together where the driver is in another process (one round trip for many), else one by one."""
    check_models = getattr(driver, "check_models", None)
    if check_models is not None:
        return check_models(calls)
    results = []
    for model, *settings in calls:
        try:
            results.append(driver.prepare_model(model, *settings, None, (), (), None) if settings else
                           driver.get_supported_operations(model))
        except Exception as e:  # kept without its frames: they hold the mutant and the driver's state
            e.__traceback__ = e.__context__ = e.__cause__ = None
            results.append(e)
    return results


def rejection_problem(what: str, result) -> str | None:
    """Why the driver's answer to a call (``what``) about an invalid model is wrong; None if it
    rejected the model properly (INVALID_ARGUMENT)."""
    if isinstance(result, HalError):
        return None if result.status == ErrorStatus.INVALID_ARGUMENT else \
            f"{what} failed with {result.status.name}, not INVALID_ARGUMENT"
    if isinstance(result, Exception):
        return f"{what} raised {type(result).__name__}: {result} (not a HalError)"
    if what == "prepare_model":
        return f"{what} accepted it (returned {type(result).__name__})"
    return f"{what} accepted it (returned {list(result)})"


# Kinds whose mutants are invalid only by the signature of the mutated operation. A driver is asked
# to judge them only for operations it implements: it cannot know the signature of one it does
# not (unlike AOSP's VTS, which expects every driver to carry the runtime's validation).
SIGNATURE_KINDS = frozenset({"operation_operand_type", "remove_operand", "remove_operation_input",
                             "add_operation_input", "add_operation_output"})


def test_validate_model(mutation_case: MutationCase, driver, request):
    mark_node(request, mutation_case)
    test = mutation_case.base.test
    original = test.model
    if mutation_case.kind in SIGNATURE_KINDS and not all(driver.get_supported_operations(clone_model(original))):
        pytest.skip(f"unsupported: the driver does not implement every operation of {test.name}, and "
                    f"{mutation_case.kind} mutants are invalid only by an operation's signature")
    asked: list[tuple[int, str, str]] = []  # (mutant, its description, the method) per call, in order

    def calls():
        """The mutants' calls, each mutant made as its calls are taken (none kept alive longer)."""
        for i, (description, mutate) in enumerate(KINDS[mutation_case.kind](original)):
            model = clone_model(original)
            preference, priority = mutate(model)
            if _valid_settings(preference, priority):  # get_supported_operations takes no preference or priority
                asked.append((i, description, "get_supported_operations"))
                yield (model,)
            asked.append((i, description, "prepare_model"))
            yield (model, preference, priority)
    results = ask(driver, calls())
    first_problems: dict[int, str] = {}  # by mutant
    for (i, description, what), result in zip(asked, results):
        problem = rejection_problem(what, result)
        if problem and i not in first_problems:
            first_problems[i] = f"{description}: {problem}"
    problems = list(first_problems.values())
    count = len({i for i, _, _ in asked})
    if not count:
        pytest.skip(f"no {mutation_case.kind} mutation applies to this model")
    assert not problems, (f"{len(problems)} of {count} invalid models of kind {mutation_case.kind} (from "
                          f"{test.name}) not rejected with INVALID_ARGUMENT:\n  " + "\n  ".join(problems[:10]))
