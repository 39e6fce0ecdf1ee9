"""Run one operation through the whole runtime, for tests: build a one-operation model, compile
it, execute it, return the outputs. Errors surface as NnapiError with the runtime's result code.

    out, = run_operation(OperationCode.ADD,
                         [tensor(T.TENSOR_FLOAT32, [[1, 2]]), tensor(T.TENSOR_FLOAT32, [[3, 4]]), scalar(T.INT32, 0)],
                         [output(T.TENSOR_FLOAT32)])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Burst, Compilation, Execution, Model, OperandType
from nnapi_ref.tolerance import compare
from nnapi_ref.types import DTYPES, SCALAR_TYPES, OperandCode, OperationCode


@dataclass
class Operand:
    """An operand of a test model: ``value`` None with ``omitted`` marks an omitted optional input;
    ``as_input`` feeds the value at execution time instead of making it a constant."""

    type: OperandCode
    value: np.ndarray | None = None
    scale: float = 0.0
    zero_point: int = 0
    dims: tuple | None = None
    channel_scales: Sequence[float] | None = None
    channel_dim: int = 0
    as_input: bool = False
    omitted: bool = False


def tensor(type: OperandCode, value, scale: float = 0.0, zero_point: int = 0, as_input: bool = True,
           channel_scales=None, channel_dim: int = 0) -> Operand:
    array = np.asarray(value, DTYPES[type])
    return Operand(type, array, scale, zero_point, array.shape, channel_scales, channel_dim, as_input)


def scalar(type: OperandCode, value) -> Operand:
    return Operand(type, np.asarray(value, DTYPES[type]), dims=())


def omitted(type: OperandCode) -> Operand:
    return Operand(type, None, dims=(0,) if type not in SCALAR_TYPES else (), omitted=True)


def output(type: OperandCode, dims: Sequence[int] | None = None, scale: float = 0.0, zero_point: int = 0) -> Operand:
    """An output; ``dims`` None leaves its shape for the runtime to infer (dynamic output shape)."""
    return Operand(type, None, scale, zero_point, tuple(dims) if dims is not None else None)


def fed_inputs(inputs: Sequence[Operand]) -> list[int]:
    """Positions of the operands fed at execution time (model inputs); the rest are constants."""
    return [i for i, o in enumerate(inputs) if o.as_input and not o.omitted and o.type not in SCALAR_TYPES]


def build_operation_model(code: OperationCode, inputs: Sequence[Operand], outputs: Sequence[Operand],
                          relaxed: bool = False) -> tuple[Model, list[int]]:
    """A finished one-operation model and the positions (in ``inputs``) of its model inputs."""
    model = Model()
    fed = fed_inputs(inputs)
    for i, o in enumerate(inputs):
        dims = o.dims if o.dims is not None else ()
        k = model.add_operand(OperandType(o.type, dims, o.scale, o.zero_point))
        if o.channel_scales is not None:
            model.set_operand_symm_per_channel_quant_params(k, o.channel_scales, o.channel_dim)
        if o.omitted:
            model.set_operand_value(k, None)
        elif i not in fed:
            model.set_operand_value(k, o.value)
    first_out = len(inputs)
    for o in outputs:
        dims = o.dims
        if dims is None:
            dims = ()
        model.add_operand(OperandType(o.type, dims, o.scale, o.zero_point))
    model.add_operation(code, list(range(len(inputs))), list(range(first_out, first_out + len(outputs))))
    model.identify_inputs_and_outputs(fed, list(range(first_out, first_out + len(outputs))))
    model.relax_computation_float32_to_float16(relaxed)
    model.finish()
    return model, fed


@dataclass(frozen=True)
class ChainType:
    """The data type of :func:`chain_model`'s tensors: float32 for a driver supporting it, else
    quant8 (scale 1/16, zero point 128: -8 to 7.94, room for the chain's values). Inputs, buffers
    and outputs are stored values of the type; :func:`chain` and :func:`assert_step` take them."""

    code: OperandCode
    scale: float = 0.0
    zero_point: int = 0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self.code])

    @property
    def quantized(self) -> bool:
        return self.scale != 0.0

    def operand(self, dims: Sequence[int]) -> OperandType:
        return OperandType(self.code, dims, self.scale, self.zero_point)

    def zeros(self, shape) -> np.ndarray:
        return np.zeros(shape, self.dtype)

    def nbytes(self, elements: int) -> int:
        return elements * self.dtype.itemsize

    def stored(self, values) -> np.ndarray:
        """Real values as this type stores them (quantized: rounded to the nearest step, saturated)."""
        values = np.asarray(values, np.float32)
        if not self.quantized:
            return values.astype(self.dtype)
        info = np.iinfo(self.dtype)
        steps = np.floor(values.astype(np.float64) / self.scale + 0.5) + self.zero_point
        return np.clip(steps, info.min, info.max).astype(self.dtype)

    def combine(self, function, x, y) -> np.ndarray:
        """``function`` (np.add, np.multiply) of stored ``x`` and ``y`` as one operation of this type
        computes it: for a quantized type on the real values, requantized."""
        if not self.quantized:
            return function(np.asarray(x, self.dtype), np.asarray(y, self.dtype))
        return self.stored(function(self.real(x), self.real(y)))

    def real(self, stored) -> np.ndarray:
        """The real values of stored ones."""
        stored = np.asarray(stored)
        if not self.quantized:
            return stored.astype(np.float32)
        return ((stored.astype(np.float64) - self.zero_point) * self.scale).astype(np.float32)


FLOAT32 = ChainType(OperandCode.TENSOR_FLOAT32)
QUANT8 = ChainType(OperandCode.TENSOR_QUANT8_ASYMM, 1 / 16, 128)
# Steps a quantized chain's output may differ from the exact one requantized at every operation:
# the driver's requantization may round each of the three operations differently by one step.
CHAIN_QUANT_STEPS = 3


def chain_type(devices) -> ChainType:
    """The type the execution-sequence tests build :func:`chain_model` in on ``devices``: float32
    where they support the chain in it (every complete driver), else quant8 where they support
    that, else float32 (the tests skip as unsupported)."""
    for type_ in (FLOAT32, QUANT8):
        if all(chain_model(type_=type_).get_supported_operations_for_devices(devices)):
            return type_
    return FLOAT32


def add_model(output_dims: Sequence[int] = (2,), finish: bool = True, input_dims: Sequence[int] = (2,),
              type_: ChainType | None = None) -> Model:
    """out = a + b on float32 tensors (or ``type_``'s), [2] unless ``input_dims`` says otherwise
    (inputs a, b; fused activation NONE), for API tests; ``output_dims`` may leave the output's
    shape unknown, ``finish=False`` leaves it editable."""
    type_ = type_ or FLOAT32
    model = Model()
    inputs = type_.operand(input_dims)
    a, b = model.add_operand(inputs), model.add_operand(inputs)
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    out = model.add_operand(type_.operand(output_dims))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    if finish:
        model.finish()
    return model


def chain_model(output_dims: Sequence[int] = (2, 2), input_dims: Sequence[int] = (2, 2),
                type_: ChainType | None = None) -> Model:
    """out = ((a + b) * b) + a on float32 [2, 2] tensors (or ``type_``'s): ADD, MUL, ADD in a chain
    (inputs a, b), for partitioning and execution-sequence tests; ``output_dims`` may leave the
    output's shape unknown, ``input_dims`` the inputs' and intermediates' (given at execution)."""
    type_ = type_ or FLOAT32
    model = Model()
    t = type_.operand(input_dims)
    a, b = model.add_operand(t), model.add_operand(t)
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(0))
    s, p = model.add_operand(t), model.add_operand(t)
    out = model.add_operand(type_.operand(output_dims))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [s])
    model.add_operation(OperationCode.MUL, [s, b, fuse], [p])
    model.add_operation(OperationCode.ADD, [p, a, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def repeated_add_model(type_: OperandType, times: int) -> Model:
    """h = x, then h = h + x ``times`` times, on one input ``x`` of ``type_``: out = (times + 1) * x,
    ``times`` ADD operations in a chain (a model whose cost grows with its length)."""
    model = Model()
    x, fuse = model.add_operand(type_), model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(0))
    h = x
    for _ in range(times):
        nxt = model.add_operand(type_)
        model.add_operation(OperationCode.ADD, [h, x, fuse], [nxt])
        h = nxt
    model.identify_inputs_and_outputs([x], [h])
    model.finish()
    return model


def chain_inputs(seed: int, shape: Sequence[int] = (2, 2),
                 type_: ChainType | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inputs a, b of :func:`chain_model` for one step of a sequence, different for every seed
    (b in [0.5, 1.5) keeps chains small), stored as ``type_`` stores them (float32 by default)."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-2, 2, shape).astype(np.float32), rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return (a, b) if type_ is None else (type_.stored(a), type_.stored(b))


def compute_in_mode(execution: Execution, mode: str, compilation: Compilation | None = None) -> None:
    """Run ``execution`` the way ``mode`` names: "sync" (compute), "async" (start_compute),
    "burst" (a new burst of ``compilation``, by default the execution's own) or "fenced"
    (start_compute_with_dependencies with none)."""
    if mode == "sync":
        execution.compute()
    elif mode == "async":
        execution.start_compute().wait()
    elif mode == "burst":
        execution.burst_compute(Burst(compilation or execution.compilation))
    elif mode == "fenced":
        execution.start_compute_with_dependencies([]).wait()
    else:
        raise ValueError(f"unknown execution mode {mode!r}")


class ExecutionSequence:
    """Executions of one compilation in one mode: one reusable Execution, and for ``burst`` one
    Burst, for the whole sequence."""

    def __init__(self, compilation: Compilation, mode: str):
        self.mode = mode
        self.execution = Execution(compilation)
        self.execution.set_reusable(True)
        self.burst = Burst(compilation) if mode == "burst" else None

    def run(self, step: str) -> None:
        """Compute; an error fails the test naming ``step``."""
        try:
            self.compute()
        except NnapiError as e:
            raise AssertionError(f"{step}: execution failed: {e}") from None

    def compute(self) -> None:
        if self.burst is not None:
            self.execution.burst_compute(self.burst)
        else:
            compute_in_mode(self.execution, self.mode)


def execute_chain(compilation: Compilation, a: np.ndarray, b: np.ndarray, mode: str = "sync") -> np.ndarray:
    """The output of a finished compilation of a two-input model whose output has ``a``'s shape
    (:func:`chain_model`, or a shorter chain), executed on ``a``, ``b`` in ``mode`` (sync,
    async, burst, fenced)."""
    execution = Execution(compilation)
    execution.set_input(0, a)
    execution.set_input(1, b)
    out = np.zeros(np.shape(a), np.float32)
    execution.set_output(0, out)
    compute_in_mode(execution, mode)
    return out


def chain(a: np.ndarray, b: np.ndarray, type_: ChainType | None = None) -> np.ndarray:
    """What :func:`chain_model` computes, in numpy float32; for a quantized ``type_``, from stored
    inputs, each operation's result requantized, as stored values."""
    type_ = type_ or FLOAT32
    return type_.combine(np.add, type_.combine(np.multiply, type_.combine(np.add, a, b), b), a)


# BOX_WITH_NMS_LIMIT's threshold: a box is kept when its score is above it.
NMS_THRESHOLD = 0.5
# Four candidate boxes, one row each: class 0 (background, ignored) and class 1, as (x1, y1, x2, y2).
# The class-1 boxes do not overlap, so suppression keeps every box scoring above the threshold.
NMS_BOXES = np.array([[0, 0, 1, 1, 10 * i, 0, 10 * i + 5, 5] for i in range(4)], np.float32)
NMS_SHIFT = np.array([1, 2, 3, 4], np.float32)
# The class-1 scores of the four boxes at each step and the boxes kept (hand-computed: those
# scoring above 0.5, best first): 2 boxes, 4 (larger), 1 (smaller), none (zero-sized), 3 (larger).
NMS_STEPS = [([0.9, 0.2, 0.7, 0.1], [0, 2]),
             ([0.6, 0.8, 0.95, 0.7], [2, 1, 3, 0]),
             ([0.3, 0.55, 0.1, 0.4], [1]),
             ([0.1, 0.2, 0.3, 0.4], []),
             ([0.85, 0.4, 0.65, 0.75], [0, 3, 2])]


def add_constant(model: Model, type_: OperandCode, value, dims=()) -> int:
    """A constant operand of ``model`` holding ``value``."""
    k = model.add_operand(OperandType(type_, dims))
    model.set_operand_value(k, value)
    return k


def add_nms(model: Model) -> tuple[int, int, int, int, int]:
    """BOX_WITH_NMS_LIMIT (hard NMS, no detection limit) over the constant :data:`NMS_BOXES` with
    a scores input ([4, 2] float32) added to ``model``: the scores operand, then the operation's
    outputs, kept scores [n], boxes [n, 4], classes [n] and batch indexes [n], n unspecified
    (zero where no box is kept)."""
    f32, i32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_INT32
    scores = model.add_operand(OperandType(f32, [4, 2]))
    # boxes, batch indexes, score threshold, no detection limit, hard NMS, IoU threshold, sigma, NMS score threshold
    params = [add_constant(model, f32, NMS_BOXES, [4, 8]), add_constant(model, i32, np.zeros(4, np.int32), [4]),
              add_constant(model, OperandCode.FLOAT32, np.float32(NMS_THRESHOLD)),
              add_constant(model, OperandCode.INT32, np.int32(-1)), add_constant(model, OperandCode.INT32, np.int32(0)),
              add_constant(model, OperandCode.FLOAT32, np.float32(0.5)),
              add_constant(model, OperandCode.FLOAT32, np.float32(1.0)),
              add_constant(model, OperandCode.FLOAT32, np.float32(0.3))]
    kept, boxes, classes, batches = (model.add_operand(OperandType(t, d))
                                     for t, d in ((f32, [0]), (f32, [0, 4]), (i32, [0]), (i32, [0])))
    model.add_operation(OperationCode.BOX_WITH_NMS_LIMIT, [scores, *params], [kept, boxes, classes, batches])
    return scores, kept, boxes, classes, batches


def nms_model() -> Model:
    """Outputs whose size the input data decides, zero-sized where no box is kept:
    :func:`add_nms`, its kept boxes fed to ADD(boxes, :data:`NMS_SHIFT`). Outputs: kept scores [n],
    shifted boxes [n, 4], classes [n] and batch indexes [n] (int32), n unspecified."""
    model = Model()
    scores, kept, boxes, classes, batches = add_nms(model)
    shifted = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, [0, 4]))
    shift = add_constant(model, OperandCode.TENSOR_FLOAT32, NMS_SHIFT, [4])
    fuse = add_constant(model, OperandCode.INT32, np.int32(0))
    model.add_operation(OperationCode.ADD, [boxes, shift, fuse], [shifted])
    model.identify_inputs_and_outputs([scores], [kept, shifted, classes, batches])
    model.finish()
    return model


def nms_scores(class1: Sequence[float]) -> np.ndarray:
    """The scores input of :func:`nms_model`: ``class1`` for class 1, the rest for background."""
    class1 = np.asarray(class1, np.float32)
    return np.stack([1 - class1, class1], axis=1)


def nms_expected(class1: Sequence[float], kept: Sequence[int]) -> list[np.ndarray]:
    """The outputs of :func:`nms_model` that keep boxes ``kept`` (in order) of scores ``class1``."""
    rows = np.asarray(kept, np.int64)
    return [np.asarray(class1, np.float32)[rows], NMS_BOXES[rows, 4:] + NMS_SHIFT,
            np.ones(len(rows), np.int32), np.zeros(len(rows), np.int32)]


def assert_step(step: str, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                type_: ChainType | None = None) -> None:
    """Every float32 output of one step of an execution sequence within NNAPI's tolerance (of a
    quantized ``type_``: stored values within CHAIN_QUANT_STEPS steps); the AssertionError names
    the step, so a driver's stale state shows where it went wrong."""
    problems = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        e, a = np.asarray(e), np.asarray(a)
        if a.size != e.size:
            problems.append(f"output {i}: {a.size} values, expected {e.size}")
            continue
        if type_ is not None and type_.quantized:
            off = np.abs(a.reshape(e.shape).astype(np.int64) - e.astype(np.int64))
            if off.size and off.max() > CHAIN_QUANT_STEPS:
                k = int(np.argmax(off))
                problems.append(f"output {i}: {int(a.reshape(-1)[k])} at [{k}], expected {int(e.reshape(-1)[k])} "
                                f"({int(off.max())} steps, at most {CHAIN_QUANT_STEPS})")
            continue
        result = compare(e, a.reshape(e.shape), OperandCode.TENSOR_FLOAT32, what=f"output {i}")
        if not result.ok:
            problems.append(result.message)
    if problems:
        raise AssertionError(f"{step}: {'; '.join(problems)}")


def counting_loop_model(step: float, limit: float = 5.0) -> Model:
    """WHILE (i < limit) { i = i + step } on a [1] float32 tensor, from the input: counts up to
    ``limit``; never ends when ``step`` is 0 (for loop-timeout tests)."""
    one, bool1 = OperandType(OperandCode.TENSOR_FLOAT32, [1]), OperandType(OperandCode.TENSOR_BOOL8, [1])
    cond = Model()
    i, lim, less = cond.add_operand(one), cond.add_operand(one), cond.add_operand(bool1)
    cond.set_operand_value(lim, np.array([limit], np.float32))
    cond.add_operation(OperationCode.LESS, [i, lim], [less])
    cond.identify_inputs_and_outputs([i], [less])
    cond.finish()
    body = Model()
    i, inc, fuse, out = (body.add_operand(one), body.add_operand(one), body.add_operand(OperandType(OperandCode.INT32)),
                         body.add_operand(one))
    body.set_operand_value(inc, np.array([step], np.float32))
    body.set_operand_value(fuse, np.int32(0))
    body.add_operation(OperationCode.ADD, [i, inc, fuse], [out])
    body.identify_inputs_and_outputs([i], [out])
    body.finish()
    model = Model()
    cond_ref, body_ref = model.add_operand(OperandType(OperandCode.MODEL)), model.add_operand(OperandType(OperandCode.MODEL))
    start, result = model.add_operand(one), model.add_operand(one)
    model.set_operand_value_from_model(cond_ref, cond)
    model.set_operand_value_from_model(body_ref, body)
    model.add_operation(OperationCode.WHILE, [cond_ref, body_ref, start], [result])
    model.identify_inputs_and_outputs([start], [result])
    model.finish()
    return model


def compile_operation(code: OperationCode, inputs: Sequence[Operand], outputs: Sequence[Operand],
                      relaxed: bool = False, devices=None) -> Compilation:
    """A finished compilation of a one-operation model (see :func:`build_operation_model`)."""
    model, _ = build_operation_model(code, inputs, outputs, relaxed)
    compilation = Compilation(model, devices)
    compilation.finish()
    return compilation


def execute_operation(compilation: Compilation, inputs: Sequence[Operand],
                      outputs: Sequence[Operand]) -> list[np.ndarray]:
    """Execute a compilation from :func:`compile_operation` once; returns its outputs as arrays
    shaped as the runtime reported."""
    execution = Execution(compilation)
    for n, i in enumerate(fed_inputs(inputs)):
        execution.set_input(n, np.ascontiguousarray(inputs[i].value))
    buffers = []
    for n, o in enumerate(outputs):
        if o.type in SCALAR_TYPES:
            size = 1
        else:
            size = int(np.prod(o.dims)) if o.dims and 0 not in o.dims else None
        buffers.append(np.zeros(size if size is not None else 1 << 16, DTYPES[o.type]))
        execution.set_output(n, buffers[-1])
    execution.compute()
    results = []
    for n, buffer in enumerate(buffers):
        dims = execution.get_output_operand_dimensions(n)
        count = int(np.prod(dims)) if dims else 1
        results.append(buffer[:count].reshape(dims).copy())
    return results


def run_operation(code: OperationCode, inputs: Sequence[Operand], outputs: Sequence[Operand],
                  relaxed: bool = False, devices=None) -> list[np.ndarray]:
    """Run one operation; returns its outputs as arrays shaped as the runtime reported."""
    return execute_operation(compile_operation(code, inputs, outputs, relaxed, devices), inputs, outputs)
