"""The CPU executor: runs a validated model's operations from the registry, in dependency order.

A :class:`Plan` is a subgraph prepared once (operation order, constants, the point after which
each temporary is dead, shapes inferred at compilation time); :class:`Executor` runs the plans of
one model for one execution, with its deadline and WHILE loop timeout.
"""
from __future__ import annotations

import ctypes
import functools
import math
import platform
import time

import numpy as np

from nnapi_ref import budget, ops, trace, vlog
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import Model, Subgraph
from nnapi_ref.ops.base import Arg, Call, ValueUnknown
from nnapi_ref.types import DTYPES, LOOP_TIMEOUT_DEFAULT_NS, SCALAR_TYPES, Lifetime, OperationCode, ResultCode
from nnapi_ref.validation import CONSTANT_LIFETIMES, omitted_input_message, topological_order

_OPERATION_CODES = {int(c): c for c in OperationCode}
_TEMPORARY, _INPUT, _NO_VALUE = Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_INPUT, Lifetime.NO_VALUE

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse instead of returning it to the system.

    An inference allocates and frees tens of megabytes of activations. By default glibc serves
    blocks above a (dynamic) threshold with fresh mmaps and trims the heap after large frees, so
    the next inference page-faults all of it in again: measured on MobileNet v2, that made the
    mean latency 1.5x the best. Keeping freed memory (blocks up to 32 MiB from the heap, never
    trimmed) holds the process at its peak footprint instead. Process-wide, once, glibc only;
    returns whether it was applied."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


def _known(shape) -> bool:
    return shape is not None and 0 not in shape


def _declared_shape(operand):
    """The declared shape of an operand: None for a tensor of unknown rank."""
    if operand.type in SCALAR_TYPES:
        return ()
    return tuple(operand.dimensions) if operand.dimensions else None


def merge_shapes(declared, inferred, what: str):
    """Check an inferred shape against a declared one (0 = unknown) and return the inferred."""
    if declared is not None and inferred is not None:
        if len(declared) != len(inferred) or any(d and d != i for d, i in zip(declared, inferred)):
            raise NnapiError(ResultCode.BAD_DATA, f"{what}: shape {list(inferred)} does not match the "
                                                  f"declared dimensions {list(declared)}")
    return inferred


class _Step:
    __slots__ = ("impl", "code", "inputs", "outputs", "in_meta", "out_meta", "release", "label", "constant_inputs",
                 "cache")


class Plan:
    """One subgraph ready to run."""

    def __init__(self, model: Model, sg: Subgraph, name: str):
        keep_freed_memory()
        registry = ops.load_all()
        self.subgraph = sg
        self.name = name
        self.constants: dict[int, np.ndarray | None] = {}
        operands = sg.operands
        for k, operand in enumerate(operands):
            lifetime = operand.lifetime
            if lifetime in CONSTANT_LIFETIMES:
                value = np.asarray(operand.value, DTYPES[operand.type])
                shape = _declared_shape(operand)
                self.constants[k] = value.reshape(shape if shape is not None else ())
            elif lifetime == Lifetime.SUBGRAPH:
                self.constants[k] = np.asarray(operand.value, np.int32)
            elif lifetime == _NO_VALUE:
                self.constants[k] = None
        order = topological_order(sg, name)
        last_use: dict[int, int] = {}
        for pos, j in enumerate(order):
            for k in sg.operations[j].inputs:
                last_use[k] = pos
        release: dict[int, list[int]] = {}
        for k, pos in last_use.items():
            if operands[k].lifetime == _TEMPORARY:
                release.setdefault(pos, []).append(k)
        metas: dict[int, tuple] = {}  # operand -> _meta, shared by the steps reading it

        def meta(k: int) -> tuple:
            if k not in metas:
                metas[k] = self._meta(operands[k])
            return metas[k]

        self.steps: list[_Step] = []
        # Input operands some operation needs a value of -> (operation label, code, input position):
        # what the error for a request omitting one names.
        self.needs_value: dict[int, tuple[str, OperationCode, int]] = {}
        for pos, j in enumerate(order):
            operation = sg.operations[j]
            step = _Step()
            step.code = _OPERATION_CODES.get(operation.type)
            if step.code is None:
                step.code = OperationCode(operation.type)
            step.impl = registry[step.code]
            step.inputs = tuple(operation.inputs)
            step.outputs = tuple(operation.outputs)
            step.in_meta = [meta(k) for k in operation.inputs]
            step.out_meta = [meta(k) for k in operation.outputs]
            step.release = release.get(pos, ())
            step.label = f"{name} operation {j} ({step.code.name})"
            step.constant_inputs = frozenset(i for i, k in enumerate(operation.inputs)
                                             if self.constants.get(k) is not None)
            step.cache = {}
            self.steps.append(step)
            signature = step.impl.match([operands[k].type for k in operation.inputs],
                                        [operands[k].type for k in operation.outputs])
            omittable = signature.omittable if signature is not None else ()  # None: a model nobody validated
            for position, k in enumerate(operation.inputs):
                if operands[k].lifetime == _INPUT and position not in omittable:
                    self.needs_value.setdefault(k, (step.label, step.code, position))
        self.shapes = self._infer_static_shapes()

    def check_omitted_inputs(self, inputs: list[np.ndarray | None]) -> None:
        """BAD_DATA when an input left without a value (omitted in a request) feeds an operation
        input that is not optional."""
        for i, (k, array) in enumerate(zip(self.subgraph.input_indexes, inputs)):
            if array is None and k in self.needs_value:
                label, code, position = self.needs_value[k]
                raise NnapiError(ResultCode.BAD_DATA, f"model input {i} is omitted: "
                                                      f"{omitted_input_message(label, code, position, k)}")

    @staticmethod
    def _meta(operand):
        return (operand.type, operand.scale, operand.zero_point, operand.channel_quant,
                operand.lifetime == _NO_VALUE, _declared_shape(operand))

    def _infer_static_shapes(self) -> dict[int, tuple | None]:
        """Propagate shapes known at compilation time, rejecting operations that can't work."""
        shapes = {k: _declared_shape(o) for k, o in enumerate(self.subgraph.operands)}
        for step in self.steps:
            ins = []
            for k, (type_, scale, zp, cq, omitted, _) in zip(step.inputs, step.in_meta):
                ins.append(Arg(type_, shapes[k], scale, zp, cq, self.constants.get(k), omitted))
            if not all(a.omitted or _known(a.shape) for a in ins):
                continue
            outs = [Arg(m[0], shapes[k], m[1], m[2], m[3]) for k, m in zip(step.outputs, step.out_meta)]
            try:
                inferred = step.impl.infer(Call(ins, outs))
            except ValueUnknown:
                continue
            except NnapiError as e:
                raise NnapiError(ResultCode.BAD_DATA, f"{step.label}: {e.message}") from None
            _check_budget(step, inferred)
            for k, m, shape in zip(step.outputs, step.out_meta, inferred):
                if shape is not None:
                    shape = tuple(shape)
                    if m[5] is not None and m[5] != shape:
                        merge_shapes(m[5], shape, f"{step.label} output operand {k}")
                    shapes[k] = shape
        return shapes


def _check_budget(step: _Step, shapes) -> None:
    """OUT_OF_MEMORY before ``step`` allocates outputs of ``shapes`` beyond the memory budget."""
    total = 0
    for shape, m in zip(shapes, step.out_meta):
        if shape is not None:
            dtype = DTYPES.get(m[0])
            total += math.prod(map(int, shape)) * (dtype.itemsize if dtype is not None else 1)
    if total > budget.limit():
        budget.check(total, f"the outputs of {step.label}")


class Executor:
    """Runs the plans of one model; one instance per execution (it holds the deadlines)."""

    def __init__(self, plans: list[Plan], relaxed: bool, deadline_ns: int | None = None,
                 loop_timeout_ns: int = LOOP_TIMEOUT_DEFAULT_NS):
        self.plans = plans
        self.relaxed = relaxed
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = loop_timeout_ns

    def check_deadline(self) -> None:
        if self.deadline_ns is not None and time.monotonic_ns() > self.deadline_ns:
            raise NnapiError(ResultCode.MISSED_DEADLINE_TRANSIENT, "the execution deadline passed")

    def run(self, inputs: list[np.ndarray | None], plan_index: int = 0) -> list[np.ndarray]:
        """Run plan ``plan_index`` (0 = main, k + 1 = referenced subgraph k) on ``inputs``
        (arrays of the input operands' types, None for an omitted one); return its outputs."""
        plan = self.plans[plan_index]
        sg = plan.subgraph
        values: dict[int, np.ndarray | None] = dict(plan.constants)
        for k, array in zip(sg.input_indexes, inputs):
            values[k] = array
        call = Call([], [], self.relaxed, self)
        traced = trace.on
        logged = vlog.on["cpuexe"]
        for step in plan.steps:
            if logged:
                vlog.info("CpuExecutor", "run %s", step.label)
            self.check_deadline()
            call.ins = [Arg(m[0], None if value is None else value.shape, m[1], m[2], m[3], value, value is None)
                        for value, m in zip(map(values.__getitem__, step.inputs), step.in_meta)]
            call.outs = [Arg(m[0], m[5], m[1], m[2], m[3]) for m in step.out_meta]
            call.constant_inputs, call.cache = step.constant_inputs, step.cache
            if traced:
                t0 = trace.now()
                results = self._run_step(step, call)
                trace.end(t0, "compute", "cpu", step.code.name, {"operation": step.label})
            else:
                results = self._run_step(step, call)
            for k, result in zip(step.outputs, results):
                values[k] = result
            for k in step.release:
                del values[k]
        return [values[k] for k in sg.output_indexes]

    def _run_step(self, step: _Step, call: Call) -> list[np.ndarray]:
        refusal = step.impl.zero_sized_inputs
        if refusal is not None:
            for i, arg in enumerate(call.ins):
                if arg.shape and 0 in arg.shape:
                    raise NnapiError(refusal, f"{step.label}: input {i} is zero-sized ({list(arg.shape)}); "
                                              f"{step.code.name} does not take zero-sized tensors")
        try:
            shapes = step.impl.infer(call)
            _check_budget(step, shapes)
            for k, m, shape in zip(step.outputs, step.out_meta, shapes):
                if shape is not None and m[5] is not None and m[5] != tuple(shape):
                    merge_shapes(m[5], tuple(shape), f"output operand {k}")
            if shapes and all(s is not None and 0 in s for s in shapes):
                # NNAPI skips an operation whose outputs are all zero-sized.
                return [np.zeros(s, DTYPES[m[0]]) for s, m in zip(shapes, step.out_meta)]
            results = step.impl.execute(call)
        except NnapiError as e:
            if e.code == ResultCode.BAD_DATA:
                raise NnapiError(ResultCode.OP_FAILED, f"{step.label}: {e.message}") from None
            raise
        except (ValueError, IndexError, TypeError, ZeroDivisionError, FloatingPointError, OverflowError,
                MemoryError, ArithmeticError) as e:
            raise NnapiError(ResultCode.OP_FAILED, f"{step.label}: {type(e).__name__}: {e}") from None
        out = []
        for k, m, shape, result in zip(step.outputs, step.out_meta, shapes, results):
            dtype = DTYPES[m[0]]
            result = np.asarray(result)
            if result.dtype != dtype:
                result = result.astype(dtype)
            if shape is not None and result.shape != tuple(shape):
                raise NnapiError(ResultCode.OP_FAILED, f"{step.label}: output operand {k} computed with shape "
                                                       f"{list(result.shape)}, expected {list(shape)}")
            if shape is None:
                merge_shapes(m[5], result.shape, f"{step.label} output operand {k}")
            out.append(result)
        return out


def prepare_plans(model: Model) -> list[Plan]:
    """Plans for the main subgraph and every referenced one (validate the model first)."""
    plans = [Plan(model, model.main, "main")]
    plans += [Plan(model, sg, f"subgraph {k}") for k, sg in enumerate(model.referenced)]
    return plans
