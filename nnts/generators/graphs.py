"""Random valid NNAPI models, driven by the operation registry (what AOSP's TestRandomGraph does).

:func:`generate` grows a connected graph one operation at a time. Each step picks a tensor the
graph already has (or a new model input), then an operation whose registry signatures accept that
tensor's type at the feature level, and lets the operation's family declaration
(:mod:`nnts.generators.families`) choose the other inputs, parameters and output quantization so that the
constraints between them hold. The builder then runs the operation on the reference's registry
(``infer`` + ``execute``) on the actual values: an operation NNAPI would reject, or whose result
leaves the range random graphs can compare (non-finite, huge, saturated quantized outputs), is
undone and another is tried. Every operand's value is therefore known, which is what keeps the
inputs of later operations inside their domains, and what lets the shrinker replace a removed
operation by a model input holding its output.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import hal, ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops.base import Arg, Call, ValueUnknown
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import DTYPES, SCALAR_TYPES, FeatureLevel, Lifetime, OperandCode as T, OperationCode
from nnapi_ref.vectors import TestModel

F32, F16, I32, BOOL8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
QUANT8 = (Q8, Q8S)
FLOATS = (F32, F16)
DATA_TYPES = (F32, F16, Q8, Q8S, I32, BOOL8)
MAX_LEVEL = int(max(FeatureLevel))
# Largest magnitude a float result may reach (AOSP's RandomGraphTest skips elements beyond these).
FLOAT_BOUND = {F32: 1e3, F16: 1e2}
MAX_SATURATED = 0.05  # fraction of a free-quantized output allowed at the ends of its range
# Wide cases (AOSP's DimensionRange::WIDE): the tensor an operation starts from has dimensions up
# to WIDE_DIM, cut down until it holds at most WIDE_ELEMENTS elements (the memory budget).
WIDE_DIM = 1000
WIDE_ELEMENTS = 300_000


class Reject(Exception):
    """The operation being added cannot be made valid here; the builder undoes it."""


@dataclass
class Tensor:
    """A tensor of the graph being built: its operand and the value the reference gives it."""

    index: int
    type: T
    value: np.ndarray
    scale: float = 0.0
    zero_point: int = 0

    @property
    def shape(self) -> tuple:
        return self.value.shape

    @property
    def rank(self) -> int:
        return self.value.ndim

    @property
    def real(self) -> np.ndarray:
        """The real values (dequantized for quant8), as float64."""
        if self.type in QUANT8:
            return (self.value.astype(np.float64) - self.zero_point) * self.scale
        return self.value.astype(np.float64)


@dataclass
class Graph:
    """A random model: its operands (constants with values), operations, model inputs and
    outputs, and the reference value of every non-constant operand (``values``)."""

    operands: list[hal.Operand]
    operations: list[hal.Operation]
    inputs: list[int]
    outputs: list[int]
    values: dict[int, np.ndarray]
    relaxed: bool = False
    seed: int = 0
    level: int = MAX_LEVEL
    ignored: frozenset = frozenset()  # outputs whose values NNAPI leaves to the driver (LSTM's scratch buffer)
    referenced: tuple = ()  # the subgraphs IF and WHILE operations run (SUBGRAPH operands index them)

    @property
    def operation_names(self) -> list[str]:
        return [OperationCode(op.type).name for op in self.operations]

    def min_level(self) -> int:
        """The lowest feature level whose signatures accept every operation."""
        registry = ops.load_all()
        level = 27
        for op in self.operations:
            sig = registry[op.type].match([self.operands[k].type for k in op.inputs],
                                          [self.operands[k].type for k in op.outputs])
            level = max(level, sig.level)
        return level

    def to_test(self, name: str, expected: list[np.ndarray] | None = None, known_outputs: bool = False) -> TestModel:
        """The graph as a test model (``expected``: one array per output; the graph's own values
        by default). ``known_outputs`` declares every output's full shape (a file replays with
        ``--dynamic`` for the unknown ones)."""
        operands = []
        for k, o in enumerate(self.operands):
            lifetime = o.lifetime
            dims = o.dimensions
            if k in self.inputs:
                lifetime, dims = Lifetime.SUBGRAPH_INPUT, self.values[k].shape
            elif k in self.outputs:
                lifetime = Lifetime.SUBGRAPH_OUTPUT
                if known_outputs:
                    dims = self.values[k].shape
            operands.append(hal.Operand(o.type, tuple(dims), o.scale, o.zero_point, lifetime, o.value, o.channel_quant))
        main = hal.Subgraph(operands, list(self.operations), tuple(self.inputs), tuple(self.outputs))
        if expected is None:
            expected = [self.values[k] for k in self.outputs]
        return TestModel(name=name, model=hal.Model(main, list(self.referenced), self.relaxed),
                         inputs=[self.values[k] for k in self.inputs], expected=list(expected),
                         ignored=[k in self.ignored for k in self.outputs], min_feature_level=self.min_level(),
                         output_dims=[tuple(self.values[k].shape) for k in self.outputs])

    def has_unknown_outputs(self) -> bool:
        return any(0 in self.operands[k].dimensions or not self.operands[k].dimensions for k in self.outputs)


# ---------------------------------------------------------------------------------------------
# The builder
# ---------------------------------------------------------------------------------------------

@dataclass
class Out:
    """An output an operation declares: its type and quantization. ``scale`` None on a quant8
    type leaves the quantization free: the builder fits it to the output's real range."""

    type: T
    scale: float | None = None
    zero_point: int = 0


def like(x: Tensor) -> Out:
    """An output with the type and quantization of ``x``."""
    return Out(x.type, x.scale, x.zero_point)


@dataclass
class Builder:
    rng: np.random.Generator
    level: int = MAX_LEVEL
    max_dim: int = 6
    wide: bool = False  # start tensors of up to WIDE_DIM per dimension (see start_shape)
    # allows(code, input types, output types): whether the driver the graph is for supports that
    # signature (None: every signature); a refused one is undone like an invalid operation
    allows: Callable | None = None
    operands: list[hal.Operand] = field(default_factory=list)
    operations: list[hal.Operation] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    values: dict[int, np.ndarray] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)  # what later operations may consume
    ignored: set = field(default_factory=set)  # outputs whose values are the driver's own (not compared)
    referenced: list = field(default_factory=list)  # subgraphs of IF and WHILE operations

    # -- undo -------------------------------------------------------------------------------

    def checkpoint(self) -> tuple:
        return len(self.operands), len(self.operations), len(self.inputs), len(self.tensors), len(self.referenced)

    def rollback(self, mark: tuple) -> None:
        n_operands, n_operations, n_inputs, n_tensors, n_referenced = mark
        for k in range(n_operands, len(self.operands)):
            self.values.pop(k, None)
            self.ignored.discard(k)
        del self.operands[n_operands:], self.operations[n_operations:], self.inputs[n_inputs:]
        del self.tensors[n_tensors:], self.referenced[n_referenced:]

    # -- randomness -------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def dim(self, low: int = 1) -> int:
        return int(self.rng.integers(low, max(low, self.max_dim) + 1))

    def shape(self, rank: int) -> tuple:
        return tuple(self.dim() for _ in range(rank))

    def start_shape(self, rank: int) -> tuple:
        """The shape of a new tensor an operation starts from: as :meth:`shape`, or in a wide
        builder log-uniform dimensions up to WIDE_DIM, the largest halved until the tensor holds
        at most WIDE_ELEMENTS elements."""
        if not self.wide:
            return self.shape(rank)
        dims = [int(np.exp(self.rng.uniform(0, np.log(WIDE_DIM + 1)))) for _ in range(rank)]
        while np.prod(dims) > WIDE_ELEMENTS:
            k = int(np.argmax(dims))
            dims[k] = max(1, dims[k] // 2)
        return tuple(max(1, d) for d in dims)

    def quantization(self, type_: T) -> tuple[float, int]:
        lo, hi = QUANT_RANGE[type_]
        scale = float(np.float32(2.0 ** self.rng.uniform(-7, -1)))
        return scale, int(self.rng.integers(lo + 32, hi - 31))

    def random_value(self, type_: T, shape, scale=0.0, zero_point=0, low=-2.0, high=2.0) -> np.ndarray:
        """Uniform values in [low, high] (real values for quant8, rounded to integers for int32)."""
        if type_ == BOOL8:
            return self.rng.random(shape) < 0.5
        real = self.rng.uniform(low, high, shape)
        if type_ in QUANT8:
            qmin, qmax = QUANT_RANGE[type_]
            return np.clip(np.round(real / scale) + zero_point, qmin, qmax).astype(DTYPES[type_])
        if type_ == I32:
            return np.round(real).astype(np.int32)
        return real.astype(DTYPES[type_])

    # -- operands ---------------------------------------------------------------------------

    def _operand(self, type_: T, dims, scale=0.0, zero_point=0, value=None, channel_quant=None) -> int:
        lifetime = Lifetime.TEMPORARY_VARIABLE if value is None else Lifetime.CONSTANT_COPY
        self.operands.append(hal.Operand(type_, tuple(dims), float(scale), int(zero_point), lifetime, value,
                                         channel_quant))
        return len(self.operands) - 1

    def scalar(self, type_: T, value) -> int:
        return self._operand(type_, (), value=np.asarray(value, DTYPES[type_]))

    def float_scalar(self, x: Tensor, value: float) -> int:
        """A FLOAT16 scalar for a float16 tensor, FLOAT32 otherwise (NNAPI's convention)."""
        return self.scalar(T.FLOAT16 if x.type == F16 else T.FLOAT32, value)

    def omitted(self, type_: T) -> int:
        """An optional input left out (no value; a quantized type keeps a valid scale)."""
        self.operands.append(hal.Operand(type_, (), 1.0 if "QUANT" in T(type_).name else 0.0, 0, Lifetime.NO_VALUE,
                                         None))
        return len(self.operands) - 1

    def ints(self, values) -> int:
        """A TENSOR_INT32 constant (axes, shapes, paddings ...)."""
        array = np.asarray(values, np.int32)
        return self._operand(I32, array.shape, value=array)

    def constant(self, type_: T, value: np.ndarray, scale=0.0, zero_point=0, channel_quant=None) -> int:
        value = np.asarray(value, DTYPES[type_])
        return self._operand(type_, value.shape, scale, zero_point, value, channel_quant)

    def fresh(self, type_: T, shape, quant: tuple | None = None, low=-2.0, high=2.0) -> Tensor:
        """A new tensor with random values: a model input, or (promoted) a constant."""
        scale, zero_point = (quant if quant is not None else self.quantization(type_)) if type_ in QUANT8 else (0.0, 0)
        return self.holding(type_, self.random_value(type_, tuple(shape), scale, zero_point, low, high), scale,
                            zero_point)

    def holding(self, type_: T, value: np.ndarray, scale=0.0, zero_point=0) -> Tensor:
        """A new tensor holding ``value``: a model input, or (3 times in 10) a constant."""
        if self.chance(0.3):
            k = self.constant(type_, value, scale, zero_point)
        else:
            k = self._operand(type_, value.shape, scale, zero_point)
            self.inputs.append(k)
        self.values[k] = value
        return Tensor(k, type_, value, scale, zero_point)

    def existing(self, type_: T, fits=lambda t: True, quant_of: Tensor | None = None) -> Tensor | None:
        """A random tensor of the graph of this type that ``fits`` (and, given ``quant_of``, has its
        quantization), or None."""
        found = [t for t in self.tensors if t.type == type_ and fits(t) and
                 (quant_of is None or (t.scale, t.zero_point) == (quant_of.scale, quant_of.zero_point))]
        return self.pick(found) if found else None

    def partner(self, x: Tensor, shape, same_quant=False, low=-2.0, high=2.0, fits=None) -> Tensor:
        """A second input for an operation on ``x``: sometimes a tensor the graph has (so
        intermediates feed several operations), else a fresh one of ``shape``."""
        if self.chance(0.4):
            t = self.existing(x.type, fits or (lambda t: t.shape == tuple(shape) and t.index != x.index),
                              x if same_quant else None)
            if t is not None:
                return t
        return self.fresh(x.type, shape, (x.scale, x.zero_point) if same_quant else None, low, high)

    # -- operations -------------------------------------------------------------------------

    def add(self, code: OperationCode, inputs: list, outputs: list[Out]) -> list[Tensor]:
        """Add operation ``code`` on operand indexes ``inputs`` (Tensors allowed) and run it;
        raise Reject when the registry refuses it at this level or its result is unusable."""
        inputs = [i.index if isinstance(i, Tensor) else i for i in inputs]
        impl = ops.load_all()[code]
        sig = impl.match([self.operands[k].type for k in inputs], [o.type for o in outputs])
        if sig is None or sig.level > self.level:
            raise Reject(f"{code.name}: no signature at level {self.level}")
        if self.allows is not None and not self.allows(code, tuple(self.operands[k].type for k in inputs),
                                                       tuple(o.type for o in outputs)):
            raise Reject(f"{code.name}: not supported by the driver")
        free = [o.type in QUANT8 and o.scale is None for o in outputs]
        for i in range(len(outputs)):
            if free[i]:
                outputs[i] = self._fit_quantization(impl, inputs, outputs, i)
        results = self._run(impl, inputs, outputs)
        for o, r, f in zip(outputs, results, free):
            check_result(o, r, f)
        tensors = []
        for o, r in zip(outputs, results):
            k = self._operand(o.type, r.shape, o.scale or 0.0, o.zero_point)
            self.values[k] = r
            tensors.append(Tensor(k, o.type, r, o.scale or 0.0, o.zero_point))
        self.operations.append(hal.Operation(code, tuple(inputs), tuple(t.index for t in tensors)))
        self.tensors += tensors
        return tensors

    def _run(self, impl, inputs: list[int], outputs: list[Out]) -> list[np.ndarray]:
        return run_operation(impl, self.operands, self.values, inputs, outputs)

    def _fit_quantization(self, impl, inputs: list[int], outputs: list[Out], i: int) -> Out:
        """Output ``i``'s quantization fitted to its real range: a coarse run finds the range
        (widening the scale until little saturates), then scale and zero point cover it (and 0)
        with a random margin."""
        out = outputs[i]
        qmin, qmax = QUANT_RANGE[out.type]
        scale = max([self.operands[k].scale for k in inputs] + [1e-3])
        middle = (qmin + qmax + 1) // 2
        for _ in range(8):
            trial = [Out(o.type, float(np.float32(scale)), middle) if o.scale is None else o for o in outputs]
            result = self._run(impl, inputs, trial)[i]
            if saturated(result, out.type) <= 0.01:
                break
            scale *= 4
        real = (result.astype(np.float64) - middle) * float(np.float32(scale))
        lo, hi = min(real.min() - scale, 0.0), max(real.max() + scale, 0.0)
        fitted = float(np.float32((hi - lo) / (qmax - qmin) * self.rng.uniform(1.0, 1.3)))
        zero_point = int(np.clip(round(qmin - lo / fitted), qmin, qmax))
        return Out(out.type, fitted, zero_point)


def run_operation(impl, operands: list[hal.Operand], values: dict, inputs: list[int],
                  outputs: list[Out]) -> list[np.ndarray]:
    """The results of operation ``impl`` on operands ``inputs`` (a constant's own value, else its
    entry in ``values``), computed by the reference's registry; Reject when it refuses them or
    a result is empty."""
    ins = []
    for k in inputs:
        o = operands[k]
        if o.lifetime == Lifetime.NO_VALUE:  # an omitted optional input
            ins.append(Arg(o.type, None, omitted=True))
            continue
        value = o.value if o.lifetime == Lifetime.CONSTANT_COPY else values[k]
        shape = () if o.type in SCALAR_TYPES else value.shape
        ins.append(Arg(o.type, shape, o.scale, o.zero_point, o.channel_quant, value))
    outs = [Arg(o.type, None, o.scale or 0.0, o.zero_point) for o in outputs]
    call = Call(ins, outs)
    try:
        shapes = impl.infer(call)
        with np.errstate(all="ignore"):
            results = impl.execute(call)
    except (NnapiError, ValueUnknown) as e:
        raise Reject(str(e)) from None
    results = [np.asarray(r).astype(DTYPES[o.type], copy=False) for r, o in zip(results, outputs)]
    if any(s is not None and tuple(s) != r.shape for s, r in zip(shapes, results)):
        raise Reject(f"{impl.name}: computed shape differs from the inferred one")
    if any(r.size == 0 for r in results):
        raise Reject(f"{impl.name}: empty output")
    return results


def saturated(result: np.ndarray, type_: T) -> float:
    qmin, qmax = QUANT_RANGE[type_]
    return float(np.mean((result == qmin) | (result == qmax))) if result.size else 0.0


def check_result(out: Out, result: np.ndarray, free: bool) -> None:
    """Reject results random graphs cannot compare: non-finite or huge floats, and quantized
    outputs whose fitted quantization still saturates (a fixed or inherited one may: that is
    the operation's meaning, as in RELU6 or LOGISTIC)."""
    if out.type in FLOATS:
        if not np.all(np.isfinite(result)) or np.max(np.abs(result), initial=0) > FLOAT_BOUND[out.type]:
            raise Reject("float result out of range")
    elif free and saturated(result, out.type) > MAX_SATURATED:
        raise Reject("quantized result saturates")


# ---------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------

def generate_from(families: dict, single_families: dict, seed: int, num_operations: int = 10, types=None,
                  operations=None, level: int = MAX_LEVEL, max_dim: int = 6, relaxed: bool | None = None,
                  wide: bool = False, allows: Callable | None = None,
                  then: Callable[[Builder], None] | None = None) -> Graph:
    """A random connected model of up to ``num_operations`` operations (fewer only when no
    operation fits after many tries), deterministic in its arguments. ``operations`` limits the
    operation codes (default: every family in ``families``; ``single_families`` are drawn only by
    name), ``types`` the data types of
    the tensors operations start from (default :data:`DATA_TYPES`), ``level`` the feature level
    of the signatures used; ``wide`` draws the tensors operations start from with dimensions up to
    WIDE_DIM (within WIDE_ELEMENTS elements); ``allows(code, input types, output types)``, where
    given, limits the signatures to those a driver supports (a partial driver's random cases);
    ``then(builder)``, where given, adds what it will after the drawn operations (a rounding
    chain's amplifier, :mod:`nnts.generators.chains`).

    Only ``num_operations`` stops the loop, so the graph for n - 1 operations is the graph for n
    without its last operation: shrinking the size shrinks the graph."""
    codes = sorted(families if operations is None else (OperationCode(c) for c in operations))
    if operations is not None:
        families = {**families, **single_families}
    rng = np.random.default_rng(seed)
    b = Builder(rng, level, max_dim, wide, allows)
    types = [T(t) for t in (types or DATA_TYPES)]
    codes = [c for c in codes if c in families]
    for _ in range(num_operations * 25):
        if len(b.operations) >= num_operations:
            break
        mark = b.checkpoint()
        start = families[codes[0]].start if len(codes) == 1 else None
        x = start(b, codes[0]) if start is not None and not b.operations else _pick_start(b, types)
        candidates = [] if x is None else [c for c in codes if families[c].accepts(x, level)]
        try:
            if not candidates:
                raise Reject("no operation takes this tensor")
            weights = np.array([families[c].weight for c in candidates])
            families[candidates[int(b.rng.choice(len(candidates), p=weights / weights.sum()))]].build(b, x)
        except Reject:
            b.rollback(mark)
    if then is not None:
        then(b)
    if relaxed is None:
        relaxed = F32 in types and b.chance(0.2)
    return _finish(b, seed, relaxed)


def _pick_start(b: Builder, types) -> Tensor | None:
    """The tensor the next operation starts from: a new model input of a random allowed type
    for the first operation, then one of the graph's tensors of an allowed type (so the graph
    stays connected): the latest often, for long chains, else one of a random type (so no type,
    say bool8, takes over). None when the graph has none."""
    if not b.operations:
        rank = 4 if b.chance(0.5) else int(b.rng.integers(1, 4))
        return b.fresh(b.pick(types), b.start_shape(rank), low=0.1 if b.chance(0.2) else -2.0)
    usable = [t for t in b.tensors if t.type in types]
    if not usable:
        return None
    if b.chance(0.4):
        return usable[-1]
    type_ = b.pick(sorted({t.type for t in usable}))
    return b.pick([t for t in usable if t.type == type_])


def _finish(b: Builder, seed: int, relaxed: bool) -> Graph:
    """Outputs: every operation result nothing consumes, and some that are consumed too; some
    declared with unknown dimensions, and some temporaries as well."""
    consumed = {k for op in b.operations for k in op.inputs}
    produced = [k for op in b.operations for k in op.outputs]
    outputs = [k for k in produced if k not in consumed or b.chance(0.1)]
    for k in produced:
        operand = b.operands[k]
        if b.level >= 29 and b.chance(0.3 if k in outputs else 0.1):
            dims = operand.dimensions
            operand.dimensions = () if b.chance(0.2) and k in outputs else tuple(
                0 if b.chance(0.5) else d for d in dims)
    # What a model's validation accepts of declared dimensions (AOSP's CAST compares them
    # literally): an operation that refuses them declares its input's on its output, in order, so
    # a chain follows. No draw: the graph stream is unchanged.
    registry = ops.load_all()
    for op in b.operations:
        impl = registry.get(op.type)
        ins = [b.operands[k] for k in op.inputs]
        outs = [b.operands[k] for k in op.outputs]
        if impl is not None and impl.check_declared([o.dimensions for o in ins], [o.dimensions for o in outs]):
            outs[0].dimensions = ins[0].dimensions
    return Graph(b.operands, b.operations, list(b.inputs), outputs, b.values, relaxed, seed, b.level,
                 frozenset(b.ignored), tuple(b.referenced))


# ---------------------------------------------------------------------------------------------
# Shrinking steps
# ---------------------------------------------------------------------------------------------

def without_operation(g: Graph, j: int) -> Graph | None:
    """``g`` without operation ``j``: its results that other operations use become model inputs
    holding their reference values; its inputs nothing else uses become outputs (so the
    operations producing them are still observed). None when nothing would be left."""
    if len(g.operations) <= 1:
        return None
    op = g.operations[j]
    rest = g.operations[:j] + g.operations[j + 1:]
    consumed = {k for o in rest for k in o.inputs}
    produced = {k for o in rest for k in o.outputs}
    outputs = [k for k in g.outputs if k not in op.outputs]
    outputs += [k for k in dict.fromkeys(op.inputs) if k in produced and k not in consumed and k not in outputs]
    inputs = g.inputs + [k for k in op.outputs if k in consumed]
    return _compact(g, rest, inputs, outputs)


def without_output(g: Graph, i: int) -> Graph | None:
    """``g`` without output ``i``, and without the operations only it needed."""
    if len(g.outputs) <= 1:
        return None
    outputs = g.outputs[:i] + g.outputs[i + 1:]
    needed, operations = set(outputs), []
    for op in reversed(g.operations):
        if needed & set(op.outputs):
            operations.insert(0, op)
            needed |= set(op.inputs)
    return _compact(g, operations, g.inputs, outputs)


def _compact(g: Graph, operations, inputs, outputs) -> Graph:
    """A graph of only the operands ``operations``, ``inputs`` and ``outputs`` use, renumbered."""
    used = {k for op in operations for k in op.inputs + op.outputs}
    inputs = [k for k in inputs if k in used]
    keep = sorted(used | set(outputs))
    new = {k: n for n, k in enumerate(keep)}
    operands = [hal.Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime, o.value, o.channel_quant)
                for o in (g.operands[k] for k in keep)]
    return Graph(operands, [hal.Operation(op.type, tuple(new[k] for k in op.inputs), tuple(new[k] for k in op.outputs))
                            for op in operations],
                 [new[k] for k in inputs], [new[k] for k in outputs],
                 {new[k]: v for k, v in g.values.items() if k in new}, g.relaxed, g.seed, g.level,
                 frozenset(new[k] for k in g.ignored if k in new), g.referenced)


# Data a dimension cut slices: model inputs, and constants of these types (TENSOR_INT32 constants
# are the operations' parameters: shapes, axes, paddings; they stay as they are).
CUT_CONSTANT_TYPES = (F32, F16, Q8, Q8S, BOOL8)


def dimension_cuts(g: Graph) -> list[tuple[int, int, int]]:
    """The cuts :func:`with_dimension_cut` may try on ``g``, as (axis counted from the last,
    size, new size): every dimension of a model input above 1 to 1, to half and one smaller;
    the largest dimensions first."""
    sizes = {(axis, d) for k in g.inputs for axis, d in enumerate(reversed(g.values[k].shape)) if d > 1}
    return [(axis, d, new) for axis, d in sorted(sizes, key=lambda s: (-s[1], s[0]))
            for new in sorted({1, d // 2, d - 1})]


def with_dimension_cut(g: Graph, axis: int, size: int, new_size: int) -> Graph | None:
    """``g`` with dimension ``axis`` (counted from the last, the way broadcasting lines shapes
    up) of its model inputs and data constants, where it is ``size``, cut to its first
    ``new_size`` entries, and every operation rerun on the reference's registry for the new
    values and shapes. None when an operation refuses them, or a float result leaves the range
    random graphs compare."""
    if g.referenced:  # IF and WHILE run subgraphs, which operations rerun one at a time cannot
        return None
    registry = ops.load_all()
    operands = [hal.Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime, o.value, o.channel_quant)
                for o in g.operands]
    values = dict(g.values)
    for k, o in enumerate(operands):
        constant = o.lifetime == Lifetime.CONSTANT_COPY
        if not (k in g.inputs or (constant and o.type in CUT_CONSTANT_TYPES)):
            continue
        value = o.value if constant else values[k]
        if value.ndim <= axis or value.shape[-1 - axis] != size:
            continue
        index = [slice(None)] * value.ndim
        index[-1 - axis] = slice(0, new_size)
        value = np.ascontiguousarray(value[tuple(index)])
        values[k], o.dimensions = value, value.shape
        if constant:
            o.value = value
    for op in g.operations:
        outs = [Out(operands[k].type, operands[k].scale, operands[k].zero_point) for k in op.outputs]
        try:
            results = run_operation(registry[op.type], operands, values, list(op.inputs), outs)
            for out, result in zip(outs, results):
                check_result(out, result, free=False)
        except Reject:
            return None
        for k, result in zip(op.outputs, results):
            declared = operands[k].dimensions
            if declared and len(declared) != result.ndim:
                return None
            values[k] = result
            operands[k].dimensions = tuple(0 if d == 0 else n for d, n in zip(declared, result.shape))
    return Graph(operands, list(g.operations), list(g.inputs), list(g.outputs), values, g.relaxed, g.seed, g.level,
                 g.ignored)
