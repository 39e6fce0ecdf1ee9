"""One declaration per operation family for the random-graph generator (:mod:`nnts.generators.graphs`), as
AOSP's TestRandomGraph declares its operation signatures: given the tensor an operation starts
from, choose the other inputs, the parameters and the output quantization so that NNAPI's
constraints between them hold, and keep the input values inside the operation's domain.

Which data types and feature levels an operation takes comes from the registry's signatures
(:func:`primary_types`); a declaration only adds what signatures cannot say. Domains: the values
of every tensor are known while the graph grows, so a family states the values it accepts (no log
of a value near 0, no division by a value near 0, no FLOOR or ARGMAX decided by a rounding
difference); results that overflow or saturate are rejected by the builder.

Not covered (``NOT_COVERED``): operations whose results cannot be compared element by element
(their declarations say why: ``incomparable``). ``SINGLE_FAMILIES`` (the recurrent
operations of :mod:`nnts.generators.recurrent`, IF and WHILE of :mod:`nnts.generators.control_flow`, the
detection operations and HASHTABLE_LOOKUP of :mod:`nnts.generators.detection`) are drawn only when asked
for by name,
by the single-operation tests: the random graphs of existing seeds stay as they were.
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnapi_ref import hal, ops
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.forms import declared_forms
from nnts.generators.graphs import BOOL8, FLOATS, I32, QUANT8, Builder, Out, Reject, Tensor, like

INT32, BOOL = T.INT32, T.BOOL

NOT_COVERED = {code: op.incomparable for code, op in ops.load_all().items() if op.incomparable}


@functools.cache
def primary_types(code: Op, level: int, position: int) -> frozenset:
    """The types input ``position`` of ``code`` takes in some signature up to ``level``."""
    return frozenset(sig.inputs[position] for sig in ops.load_all()[code].signatures
                     if sig.level <= level and len(sig.inputs) > position)


def start_type(b, code: Op, position: int = 0):
    """A random type input ``position`` of ``code`` takes at the builder's level, for a start
    (``Family.start``); None where no signature of that level has one (the start then returns
    None: at feature levels 27 and 28 a level-29 operation has no case)."""
    types = sorted(primary_types(code, b.level, position))
    return b.pick(types) if types else None


@dataclass(frozen=True)
class Family:
    """How to add operation ``code`` starting from a tensor ``x``: ``build(b, x, code)``."""

    code: Op
    build_fn: Callable
    ranks: tuple = (1, 2, 3, 4)
    domain: Callable[[Tensor], bool] | None = None
    position: int = 0  # where x goes in the registry's signatures
    weight: float = 1.0  # how often it is picked: a declaration's operations share one weight
    start: Callable | None = None  # start(b, code): a fresh tensor for a graph of this operation only

    def accepts(self, x: Tensor, level: int) -> bool:
        return (x.rank in self.ranks and x.type in primary_types(self.code, level, self.position)
                and (self.domain is None or bool(self.domain(x))))

    def build(self, b: Builder, x: Tensor) -> None:
        self.build_fn(b, x, self.code)


FAMILIES: dict[Op, Family] = {}
# Families drawn only where an operation is asked for by name (the single-operation tests,
# :mod:`nnts.generators.single`): in FAMILIES they would change the random graph of every existing seed.
SINGLE_FAMILIES: dict[Op, Family] = {}


def declare(codes, ranks=(1, 2, 3, 4), domain=None, position=0, start=None, single_only=False):
    def wrap(fn):
        for code in codes:
            (SINGLE_FAMILIES if single_only else FAMILIES)[code] = Family(code, fn, ranks, domain, position,
                                                                           1.0 / len(codes), start)
        return fn
    return wrap


# -- shared helpers -------------------------------------------------------------------------------

def margin(x: Tensor) -> np.ndarray:
    """How far apart two values must be for their order not to hang on a rounding difference."""
    return 1e-2 * (1.0 + np.abs(x.real)) if x.type in FLOATS else np.full(x.shape, 0.5)


def far_from_integers(x: Tensor) -> bool:
    v = x.real
    return bool(np.all(np.abs(v - np.round(v)) >= 1e-2 * (1.0 + np.abs(v))))


def distinct_along(x: Tensor, axis: int) -> bool:
    """No two values along ``axis`` within a rounding difference of each other."""
    v = np.sort(x.real, axis=axis)
    gaps = np.diff(v, axis=axis)
    return gaps.size == 0 or bool(np.all(gaps >= np.take(margin(x), range(gaps.shape[axis]), axis=axis)))


def broadcast_shape(b: Builder, shape: tuple) -> tuple:
    """A shape that broadcasts against ``shape``: the same, or a suffix with some dims 1."""
    if b.chance(0.5):
        return shape
    rank = int(b.rng.integers(1, len(shape) + 1))
    return tuple(1 if b.chance(0.3) else d for d in shape[len(shape) - rank:])


def fuse(b: Builder, x: Tensor) -> int:
    return b.scalar(INT32, 0 if x.type == I32 else int(b.rng.integers(4)))


def axis(b: Builder, x: Tensor) -> int:
    a = int(b.rng.integers(x.rank))
    return a - x.rank if b.chance(0.3) else a


def axes(b: Builder, x: Tensor) -> list[int]:
    n = int(b.rng.integers(1, x.rank + 1))
    return sorted(int(a) for a in b.rng.choice(x.rank, n, replace=False))


def free(x: Tensor) -> Out:
    """An output of x's type whose quantization (if any) the builder fits to its values."""
    return Out(x.type)


# -- elementwise ----------------------------------------------------------------------------------

@declare([Op.ADD, Op.SUB, Op.MUL, Op.DIV])
def binary_arithmetic(b: Builder, x: Tensor, code: Op) -> None:
    shape = broadcast_shape(b, x.shape)
    if code == Op.DIV:  # divisors away from 0
        y = b.partner(x, shape, low=0.75, high=2.0,
                      fits=lambda t: t.shape == shape and np.min(np.abs(t.real), initial=1) >= 0.5)
    else:
        y = b.partner(x, shape)
    b.add(code, [x, y, fuse(b, x)], [free(x)])


@declare([Op.MAXIMUM, Op.MINIMUM, Op.PRELU])
def binary(b: Builder, x: Tensor, code: Op) -> None:
    y = b.partner(x, broadcast_shape(b, x.shape))
    b.add(code, [x, y], [free(x)])


def _positive(b: Builder, code: Op) -> Tensor | None:
    """A tensor of values in [0.3, 2] (POW's base) of a type and rank POW takes."""
    type_ = start_type(b, code)
    return None if type_ is None else b.fresh(type_, b.start_shape(int(b.rng.integers(1, 5))), low=0.3, high=2.0)


@declare([Op.POW], domain=lambda x: np.min(x.real) >= 0.25, start=_positive)
def power(b: Builder, x: Tensor, code: Op) -> None:
    exponent = b.fresh(x.type, broadcast_shape(b, x.shape), low=-1.5, high=1.5)
    b.add(code, [x, exponent], [like(x)])


def _unary(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [free(x) if code in (Op.RSQRT, Op.HARD_SWISH) else like(x)])


declare([Op.ABS, Op.NEG, Op.SIN, Op.RELU, Op.RELU1, Op.RELU6, Op.HARD_SWISH])(_unary)
declare([Op.EXP], domain=lambda x: np.max(x.real) <= 4)(_unary)
declare([Op.LOG, Op.RSQRT], domain=lambda x: np.min(x.real) >= 0.1)(_unary)
declare([Op.SQRT], domain=lambda x: np.min(x.real) >= 0.01)(_unary)
declare([Op.FLOOR], domain=far_from_integers)(_unary)

def fixed_out(code: Op, x: Tensor) -> Out:
    """The output of ``code`` for ``x``, with the quantization its declaration fixes."""
    if x.type in QUANT8:
        return Out(x.type, *ops.get(code).fixed_output_quant[x.type])
    return like(x)


@declare([Op.LOGISTIC, Op.TANH])
def sigmoid_like(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [fixed_out(code, x)])


@declare([Op.ELU])
def elu(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.float_scalar(x, b.rng.uniform(0.1, 2.0))], [like(x)])


# -- comparisons and logic ------------------------------------------------------------------------

@declare([Op.EQUAL, Op.NOT_EQUAL, Op.LESS, Op.LESS_EQUAL, Op.GREATER, Op.GREATER_EQUAL])
def comparison(b: Builder, x: Tensor, code: Op) -> None:
    y = b.partner(x, x.shape, same_quant=True)
    if x.type in FLOATS and np.any(np.abs(x.real - y.real) < margin(x)):
        raise Reject("values too close to compare")
    b.add(code, [x, y], [Out(BOOL8)])


@declare([Op.LOGICAL_AND, Op.LOGICAL_OR])
def logical(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.partner(x, broadcast_shape(b, x.shape))], [Out(BOOL8)])


@declare([Op.LOGICAL_NOT])
def logical_not(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [Out(BOOL8)])


@declare([Op.SELECT], position=1)
def select(b: Builder, x: Tensor, code: Op) -> None:
    condition = b.existing(BOOL8, lambda t: t.shape == x.shape) or b.fresh(BOOL8, x.shape)
    b.add(code, [condition, x, b.partner(x, x.shape, same_quant=True)], [like(x)])


# -- normalization --------------------------------------------------------------------------------

@declare([Op.SOFTMAX, Op.LOG_SOFTMAX])
def softmax(b: Builder, x: Tensor, code: Op) -> None:
    ins = [x, b.float_scalar(x, b.rng.uniform(0.5, 2.0))]
    if code == Op.LOG_SOFTMAX or b.chance(0.5):
        ins.append(b.scalar(INT32, axis(b, x)))
    b.add(code, ins, [fixed_out(Op.SOFTMAX, x) if code == Op.SOFTMAX else like(x)])


@declare([Op.L2_NORMALIZATION])
def l2_normalization(b: Builder, x: Tensor, code: Op) -> None:
    """With an axis, or without (the last dimension) where the form leaves it out."""
    with_axis = len(pick_form(b, code, x).inputs) > 1
    a = axis(b, x) if with_axis else -1
    if np.min(np.sqrt(np.sum(x.real ** 2, axis=a))) < 0.1:
        raise Reject("a vector too close to 0 to normalize")
    b.add(code, [x] + [b.scalar(INT32, a)] * with_axis, [fixed_out(code, x)])


@declare([Op.LOCAL_RESPONSE_NORMALIZATION])
def local_response_normalization(b: Builder, x: Tensor, code: Op) -> None:
    params = [b.scalar(INT32, int(b.rng.integers(1, 4)))]
    params += [b.float_scalar(x, v) for v in (b.rng.uniform(0.5, 2), b.rng.uniform(0.1, 1), b.rng.uniform(0.3, 0.8))]
    with_axis = len(pick_form(b, code, x).inputs) > len(params) + 1
    b.add(code, [x] + params + [b.scalar(INT32, axis(b, x))] * with_axis, [like(x)])


@declare([Op.INSTANCE_NORMALIZATION], ranks=(4,),
         domain=lambda x: x.shape[1] * x.shape[2] > 1 and np.min(np.var(x.real, axis=(1, 2))) >= 1e-2)
def instance_normalization(b: Builder, x: Tensor, code: Op) -> None:
    params = [b.float_scalar(x, v) for v in (b.rng.uniform(0.5, 2), b.rng.uniform(-1, 1), 1e-3)]
    b.add(code, [x] + params + [b.scalar(BOOL, False)], [like(x)])


# -- convolution and pooling --------------------------------------------------------------------

@functools.cache
def _forms(code: Op, level: int) -> list:
    return sorted(declared_forms(code, level), key=str)


def pick_form(b: Builder, code: Op, x: Tensor, position: int = 0):
    """One of the registry's forms of ``code`` at the builder's level taking ``x`` at ``position``,
    every form as likely (:mod:`nnts.generators.coverage`)."""
    forms = [f for f in _forms(code, b.level) if len(f.inputs) > position and f.inputs[position] == x.type]
    if not forms:
        raise Reject(f"{code.name}: no form takes {x.type.name}")
    return b.pick(forms)


def _weights(b: Builder, x: Tensor, shape, fan_in: int, channel_dim: int | None = None) -> tuple[int, int]:
    """Filter and bias constants of shapes ``shape[0]`` and ``shape[1]``, scaled by the fan-in
    so that outputs stay in the inputs' range; a quant8 bias has scale input x filter scale.
    ``channel_dim``: a TENSOR_QUANT8_SYMM_PER_CHANNEL filter quantized along that dimension (the
    bias's scale 0, each element's being input x filter scale of its channel)."""
    bound = 1.0 / np.sqrt(fan_in)
    if channel_dim is not None:
        channels = shape[0][channel_dim]
        scales = (bound / 127 * b.rng.uniform(0.8, 2.0, channels)).astype(np.float32)
        along = [1] * len(shape[0])
        along[channel_dim] = channels
        w = np.clip(np.round(b.rng.uniform(-bound, bound, shape[0]) / scales.reshape(along)), -127, 127)
        quant = hal.ChannelQuant(tuple(float(v) for v in scales), channel_dim)
        bias_scales = (np.float32(x.scale) * scales).astype(np.float64)
        bias = np.round(b.rng.uniform(-0.5, 0.5, shape[1]) / bias_scales).astype(np.int32)
        return b.constant(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, w, channel_quant=quant), b.constant(I32, bias)
    if x.type in QUANT8:
        scale, zero_point = b.quantization(x.type)
        w = b.random_value(x.type, shape[0], scale, zero_point, -bound, bound)
        bias_scale = float(np.float32(x.scale) * np.float32(scale))
        bias = np.round(b.rng.uniform(-0.5, 0.5, shape[1]) / bias_scale).astype(np.int32)
        return b.constant(x.type, w, scale, zero_point), b.constant(I32, bias, bias_scale)
    w = b.random_value(x.type, shape[0], low=-bound, high=bound)
    return b.constant(x.type, w), b.constant(x.type, b.random_value(x.type, shape[1], low=-0.5, high=0.5))


@dataclass
class Window:
    """The spatial side of a convolution or pool in the form drawn: padding kind, layout, the
    image's height, width and depth in that layout, filter size and dilation factors."""

    form: object
    explicit: bool
    tail: int  # optional inputs present: 0, 1 (layout), 3 (layout and dilation factors)
    nchw: bool
    h: int
    w: int
    c: int
    fh: int = 1
    fw: int = 1
    dh: int = 1
    dw: int = 1


def window(b: Builder, x: Tensor, code: Op, nchw: bool | None = None) -> Window:
    """A form of ``code`` for ``x`` and the layout (NCHW on half the forms that have a layout
    flag, unless ``nchw`` says) and dilation (above 1 on most forms that have the factors)."""
    form = pick_form(b, code, x)
    implicit_inputs, explicit_inputs = ops.get(code).window_inputs
    n, probe = len(form.inputs), implicit_inputs.arity
    explicit = n > probe and form.inputs[probe] != T.BOOL
    tail = n - (explicit_inputs if explicit else implicit_inputs).arity
    layout_optional = implicit_inputs.arity == implicit_inputs.layout
    if nchw is None:
        nchw = (tail >= 1 or not layout_optional) and b.chance(0.5)
    _, h, w, c = (x.shape[0],) + x.shape[2:] + (x.shape[1],) if nchw else x.shape
    win = Window(form, explicit, tail, nchw, h, w, c)
    if tail == 3 and b.chance(0.75):
        win.dh, win.dw = int(b.rng.integers(1, 4)), int(b.rng.integers(1, 4))
    # The dilated filter fits the image, so VALID padding leaves an output.
    win.fh = int(b.rng.integers(1, min(3, (h - 1) // win.dh + 1) + 1))
    win.fw = int(b.rng.integers(1, min(3, (w - 1) // win.dw + 1) + 1))
    return win


def padding_and_strides(b: Builder, win: Window) -> list[int]:
    """Explicit paddings (left, right, top, bottom; each below the dilated filter size and at
    most 2) or a padding scheme (SAME or VALID), then the strides (width, height)."""
    if win.explicit:
        most_w, most_h = min((win.fw - 1) * win.dw, 2), min((win.fh - 1) * win.dh, 2)
        pads = [int(b.rng.integers(0, m + 1)) for m in (most_w, most_w, most_h, most_h)]
    else:
        pads = [int(b.rng.integers(1, 3))]
    return [b.scalar(INT32, v) for v in pads + [int(b.rng.integers(1, 3)), int(b.rng.integers(1, 3))]]


def layout_and_dilation(b: Builder, win: Window) -> list[int]:
    """The optional tail of the form: the layout flag, then the dilation factors (width, height)."""
    tail = [b.scalar(BOOL, win.nchw)] if win.tail >= 1 else []
    if win.tail == 3:
        tail += [b.scalar(INT32, win.dw), b.scalar(INT32, win.dh)]
    return tail


def per_channel(win: Window) -> bool:
    return win.form.inputs[1] == T.TENSOR_QUANT8_SYMM_PER_CHANNEL


@declare([Op.CONV_2D], ranks=(4,))
def conv_2d(b: Builder, x: Tensor, code: Op) -> None:
    win = window(b, x, code)
    out_c = b.dim()
    w, bias = _weights(b, x, ((out_c, win.fh, win.fw, win.c), (out_c,)), win.fh * win.fw * win.c,
                       0 if per_channel(win) else None)
    b.add(code, [x, w, bias] + padding_and_strides(b, win) + [fuse(b, x)] + layout_and_dilation(b, win), [free(x)])


@declare([Op.DEPTHWISE_CONV_2D], ranks=(4,))
def depthwise_conv_2d(b: Builder, x: Tensor, code: Op) -> None:
    """A depth multiplier above 1 on most draws (with dilation where the form has it: the
    combination a driver's special case can get wrong)."""
    win = window(b, x, code)
    multiplier = int(b.rng.integers(2, 4)) if b.chance(0.6) else 1
    out_c = win.c * multiplier
    w, bias = _weights(b, x, ((1, win.fh, win.fw, out_c), (out_c,)), win.fh * win.fw,
                       3 if per_channel(win) else None)
    b.add(code, [x, w, bias] + padding_and_strides(b, win) + [b.scalar(INT32, multiplier), fuse(b, x)]
          + layout_and_dilation(b, win), [free(x)])


@declare([Op.GROUPED_CONV_2D], ranks=(4,), domain=lambda x: x.shape[3] % 2 == 0 or x.shape[1] % 2 == 0)
def grouped_conv_2d(b: Builder, x: Tensor, code: Op) -> None:
    groups = 2
    layouts = [nchw for nchw, c in ((False, x.shape[3]), (True, x.shape[1])) if c % groups == 0]
    win = window(b, x, code, nchw=b.pick(layouts))
    out_c = groups * int(b.rng.integers(1, 3))
    w, bias = _weights(b, x, ((out_c, win.fh, win.fw, win.c // groups), (out_c,)), win.fh * win.fw * win.c // groups,
                       0 if per_channel(win) else None)
    b.add(code, [x, w, bias] + padding_and_strides(b, win) + [b.scalar(INT32, groups), fuse(b, x),
                                                              b.scalar(BOOL, win.nchw)], [free(x)])


@declare([Op.TRANSPOSE_CONV_2D], ranks=(4,))
def transpose_conv_2d(b: Builder, x: Tensor, code: Op) -> None:
    """Explicit paddings (each below the filter size), or an output shape with SAME (input size
    x stride) or VALID ((input size - 1) x stride + filter size) padding."""
    win = window(b, x, code)
    n, h, w, c = x.shape[0], win.h, win.w, win.c
    out_c, kh, kw = b.dim(), int(b.rng.integers(1, 4)), int(b.rng.integers(1, 4))
    sh, sw = int(b.rng.integers(1, 3)), int(b.rng.integers(1, 3))
    filters, bias = _weights(b, x, ((out_c, kh, kw, c), (out_c,)), kh * kw * c, 0 if per_channel(win) else None)
    if win.explicit:
        pads = [int(b.rng.integers(0, k)) for k in (kw, kw, kh, kh)]  # left, right, top, bottom
        params = [b.scalar(INT32, p) for p in pads]
    else:
        same = b.chance(0.5)
        out_h, out_w = (h * sh, w * sw) if same else ((h - 1) * sh + kh, (w - 1) * sw + kw)
        shape = [n, out_c, out_h, out_w] if win.nchw else [n, out_h, out_w, out_c]
        params = [b.ints(shape), b.scalar(INT32, 1 if same else 2)]
    params += [b.scalar(INT32, sw), b.scalar(INT32, sh), fuse(b, x), b.scalar(BOOL, win.nchw)]
    b.add(code, [x, filters, bias] + params, [free(x)])


@declare([Op.FULLY_CONNECTED], ranks=(2, 3, 4))
def fully_connected(b: Builder, x: Tensor, code: Op) -> None:
    units, size = b.dim(), x.shape[-1]
    w, bias = _weights(b, x, ((units, size), (units,)), size)
    b.add(code, [x, w, bias, fuse(b, x)], [free(x)])


@declare([Op.BATCH_MATMUL], ranks=(2, 3, 4))
def batch_matmul(b: Builder, x: Tensor, code: Op) -> None:
    y = b.fresh(x.type, x.shape[:-2] + (x.shape[-1], b.dim()), low=-1.0, high=1.0)
    b.add(code, [x, y, b.scalar(BOOL, False), b.scalar(BOOL, False)], [free(x)])


@declare([Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D], ranks=(4,))
def pool(b: Builder, x: Tensor, code: Op) -> None:
    win = window(b, x, code)
    b.add(code, [x] + padding_and_strides(b, win) + [b.scalar(INT32, win.fw), b.scalar(INT32, win.fh), fuse(b, x)]
          + layout_and_dilation(b, win), [like(x)])


# -- reductions -----------------------------------------------------------------------------------

@declare([Op.MEAN, Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_ALL, Op.REDUCE_ANY])
def reduce(b: Builder, x: Tensor, code: Op) -> None:
    keep = b.chance(0.5)
    flag = b.scalar(INT32, int(keep)) if code == Op.MEAN else b.scalar(BOOL, keep)
    b.add(code, [x, b.ints(axes(b, x)), flag], [like(x)])


@declare([Op.ARGMAX, Op.ARGMIN])
def arg_reduce(b: Builder, x: Tensor, code: Op) -> None:
    a = axis(b, x)
    if not distinct_along(x, a):
        raise Reject("ties along the axis")
    b.add(code, [x, b.scalar(INT32, a)], [Out(I32)])


@declare([Op.TOPK_V2], domain=lambda x: distinct_along(x, -1))
def top_k(b: Builder, x: Tensor, code: Op) -> None:
    k = int(b.rng.integers(1, x.shape[-1] + 1))
    b.add(code, [x, b.scalar(INT32, k)], [like(x), Out(I32)])


# -- shapes, slicing, space -----------------------------------------------------------------------

def _factor(b: Builder, size: int, rank: int) -> list[int]:
    """A random shape of ``rank`` dimensions with ``size`` elements."""
    dims = [1] * rank
    n, p = size, 2
    while n > 1:
        while n % p == 0:
            dims[int(b.rng.integers(rank))] *= p
            n //= p
        p += 1
    return dims


@declare([Op.RESHAPE])
def reshape(b: Builder, x: Tensor, code: Op) -> None:
    dims = _factor(b, x.value.size, int(b.rng.integers(1, 5)))
    if b.chance(0.3):
        dims[int(b.rng.integers(len(dims)))] = -1
    b.add(code, [x, b.ints(dims)], [like(x)])


@declare([Op.SQUEEZE], domain=lambda x: 1 in x.shape and x.rank > 1)
def squeeze(b: Builder, x: Tensor, code: Op) -> None:
    ones = [a for a, d in enumerate(x.shape) if d == 1][:x.rank - 1]
    b.add(code, [x, b.ints(ones)], [like(x)])


@declare([Op.EXPAND_DIMS], ranks=(1, 2, 3))
def expand_dims(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.scalar(INT32, int(b.rng.integers(-x.rank - 1, x.rank + 1)))], [like(x)])


@declare([Op.TRANSPOSE])
def transpose(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.ints(b.rng.permutation(x.rank))], [like(x)])


@declare([Op.CONCATENATION])
def concatenation(b: Builder, x: Tensor, code: Op) -> None:
    a = int(b.rng.integers(x.rank))
    parts = [x]
    for _ in range(int(b.rng.integers(1, 3))):
        shape = x.shape[:a] + (b.dim(),) + x.shape[a + 1:]
        parts.append(b.partner(x, shape, same_quant=True,
                               fits=lambda t: t.rank == x.rank and t.shape[:a] + t.shape[a + 1:] ==
                               x.shape[:a] + x.shape[a + 1:]))
    b.add(code, parts + [b.scalar(INT32, a)], [like(x)])


@declare([Op.PACK], ranks=(1, 2, 3), position=1)
def pack(b: Builder, x: Tensor, code: Op) -> None:
    parts = [x] + [b.partner(x, x.shape, same_quant=True) for _ in range(int(b.rng.integers(1, 3)))]
    b.add(code, [b.scalar(INT32, int(b.rng.integers(x.rank + 1)))] + parts, [like(x)])



@declare([Op.SPLIT], domain=lambda x: max(x.shape) > 1)
def split(b: Builder, x: Tensor, code: Op) -> None:
    a = b.pick([a for a, d in enumerate(x.shape) if d > 1])
    n = b.pick([n for n in range(2, x.shape[a] + 1) if x.shape[a] % n == 0])
    b.add(code, [x, b.scalar(INT32, a), b.scalar(INT32, n)], [like(x)] * n)


def _paddings(b: Builder, x: Tensor, most: int) -> int:
    return b.ints([[int(b.rng.integers(0, most + 1)) for _ in range(2)] for _ in range(x.rank)])


@declare([Op.PAD])
def pad(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, _paddings(b, x, 2)], [like(x)])


@declare([Op.PAD_V2])
def pad_v2(b: Builder, x: Tensor, code: Op) -> None:
    if x.type in QUANT8:
        value = b.scalar(INT32, int(b.random_value(x.type, (), x.scale, x.zero_point)))
    else:
        value = b.float_scalar(x, b.rng.uniform(-2, 2))
    b.add(code, [x, _paddings(b, x, 2), value], [like(x)])


@declare([Op.MIRROR_PAD], domain=lambda x: min(x.shape) > 1)
def mirror_pad(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, _paddings(b, x, min(min(x.shape) - 1, 2)), b.scalar(INT32, int(b.rng.integers(2)))], [like(x)])


@declare([Op.TILE], domain=lambda x: x.value.size <= 64)
def tile(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.ints(b.rng.integers(1, 3, x.rank))], [like(x)])


@declare([Op.REVERSE])
def reverse(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x, b.ints([int(b.rng.integers(x.rank))])], [like(x)])


@declare([Op.SLICE])
def slice_(b: Builder, x: Tensor, code: Op) -> None:
    begin = [int(b.rng.integers(d)) for d in x.shape]
    size = [int(b.rng.integers(1, d - s + 1)) if b.chance(0.8) else -1 for d, s in zip(x.shape, begin)]
    b.add(code, [x, b.ints(begin), b.ints(size)], [like(x)])


@declare([Op.STRIDED_SLICE])
def strided_slice(b: Builder, x: Tensor, code: Op) -> None:
    begin = [int(b.rng.integers(d)) for d in x.shape]
    end = [int(b.rng.integers(s + 1, d + 1)) for d, s in zip(x.shape, begin)]
    strides = [int(b.rng.integers(1, 3)) for _ in x.shape]
    masks = [b.scalar(INT32, int(b.rng.integers(1 << x.rank))) for _ in range(2)]
    b.add(code, [x, b.ints(begin), b.ints(end), b.ints(strides)] + masks + [b.scalar(INT32, 0)], [like(x)])


@declare([Op.GATHER])
def gather(b: Builder, x: Tensor, code: Op) -> None:
    a = int(b.rng.integers(x.rank))
    shape = (b.dim(),) if x.rank == 4 or b.chance(0.7) else (b.dim(), b.dim())
    indices = b.rng.integers(0, x.shape[a], shape)
    b.add(code, [x, b.scalar(INT32, a), b.ints(indices)], [like(x)])


@declare([Op.EMBEDDING_LOOKUP], ranks=(2, 3, 4), position=1)
def embedding_lookup(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [b.ints(b.rng.integers(0, x.shape[0], b.dim())), x], [like(x)])


def layout(b: Builder, code: Op, x: Tensor, arity: int) -> tuple[bool, list[int]]:
    """A form of ``code`` for ``x``: with the optional layout flag after ``arity`` inputs (NCHW
    half the time) or without. Returns (NCHW, the flag operand or nothing)."""
    form = pick_form(b, code, x)
    if len(form.inputs) <= arity:
        return False, []
    nchw = b.chance(0.5)
    return nchw, [b.scalar(BOOL, nchw)]


def image_axes(nchw: bool) -> tuple[int, int, int]:
    """The (height, width, depth) axes of a 4-D image in the layout."""
    return (2, 3, 1) if nchw else (1, 2, 3)


@declare([Op.SPACE_TO_DEPTH], ranks=(4,), domain=lambda x: x.shape[2] % 2 == 0 and x.shape[1] % 2 + x.shape[3] % 2 < 2)
def space_to_depth(b: Builder, x: Tensor, code: Op) -> None:
    nchw, flag = layout(b, code, x, 2)
    h, w, _ = image_axes(nchw)
    if x.shape[h] % 2 or x.shape[w] % 2:
        raise Reject("height or width not a multiple of the block size")
    b.add(code, [x, b.scalar(INT32, 2)] + flag, [like(x)])


@declare([Op.DEPTH_TO_SPACE], ranks=(4,), domain=lambda x: x.shape[3] % 4 == 0 or x.shape[1] % 4 == 0)
def depth_to_space(b: Builder, x: Tensor, code: Op) -> None:
    nchw, flag = layout(b, code, x, 2)
    if x.shape[image_axes(nchw)[2]] % 4:
        raise Reject("depth not a multiple of the block size squared")
    b.add(code, [x, b.scalar(INT32, 2)] + flag, [like(x)])


@declare([Op.SPACE_TO_BATCH_ND], ranks=(4,))
def space_to_batch(b: Builder, x: Tensor, code: Op) -> None:
    nchw, flag = layout(b, code, x, 3)
    h, w, _ = image_axes(nchw)
    block = [int(b.rng.integers(1, 3)) for _ in range(2)]
    pads = []
    for d, k in zip((x.shape[h], x.shape[w]), block):
        extra = (-d) % k + k * int(b.rng.integers(2))
        before = int(b.rng.integers(extra + 1))
        pads.append([before, extra - before])
    b.add(code, [x, b.ints(block), b.ints(pads)] + flag, [like(x)])


@declare([Op.BATCH_TO_SPACE_ND], ranks=(4,), domain=lambda x: x.shape[0] % 2 == 0)
def batch_to_space(b: Builder, x: Tensor, code: Op) -> None:
    nchw, flag = layout(b, code, x, 2)
    block = b.pick([[2, 1], [1, 2]] + ([[2, 2]] if x.shape[0] % 4 == 0 else []))
    b.add(code, [x, b.ints(block)] + flag, [like(x)])


@declare([Op.CHANNEL_SHUFFLE], domain=lambda x: max(x.shape) > 1)
def channel_shuffle(b: Builder, x: Tensor, code: Op) -> None:
    a = b.pick([a for a, d in enumerate(x.shape) if d > 1])
    groups = b.pick([g for g in range(1, x.shape[a] + 1) if x.shape[a] % g == 0])
    b.add(code, [x, b.scalar(INT32, groups), b.scalar(INT32, a)], [like(x)])


# Image sizes a resize first scales its input to, one time in three: ONNX Runtime's nearest
# neighbour picks another source pixel than NNAPI's only from 14 source pixels up (30 rows to 2),
# which the small images of random graphs never reached.
LARGE_IMAGE = (15, 40)


@declare([Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR], ranks=(4,))
def resize(b: Builder, x: Tensor, code: Op) -> None:
    """The output size as two INT32 scalars or two float scale factors (a scale a little above
    size / input size, so that floor(input size x scale) is the size), then as many of the
    optional flags as the form has: layout, align_corners, half_pixel_centers (not both). One
    time in three the image is first resized (the same form) to :data:`LARGE_IMAGE` pixels."""
    form = pick_form(b, code, x)
    if _large_image_first(b):
        x = _resize_to(b, x, code, form, lambda: int(b.rng.integers(LARGE_IMAGE[0], LARGE_IMAGE[1] + 1)))
    _resize_to(b, x, code, form, b.dim)


def _large_image_first(b: Builder) -> bool:
    """True one time in three, decided by a generator seeded from the builder's state rather than
    drawn from it: a graph without the large image is the one earlier versions made of its seed
    (the campaign seeds the conformance pages and tests name)."""
    state = zlib.crc32(repr(b.rng.bit_generator.state).encode())
    return bool(np.random.default_rng(state).random() < 1 / 3)


def _resize_to(b: Builder, x: Tensor, code: Op, form, draw_size) -> Tensor:
    """``x`` resized by ``code`` in ``form`` to a width and a height from ``draw_size()``."""
    n = len(form.inputs)
    nchw = n > 3 and b.chance(0.5)
    h, w, _ = image_axes(nchw)
    sizes = [draw_size(), draw_size()]  # width, height
    if form.inputs[1] == INT32:
        size = [b.scalar(INT32, v) for v in sizes]
    else:
        size = [b.scalar(form.inputs[1], (v + 0.5) / x.shape[axis]) for v, axis in zip(sizes, (w, h))]
    flags = [nchw] + [False, False][:n - 4]
    if n > 4 and b.chance(0.7):
        flags[b.pick([1, 2][:n - 4])] = True
    return b.add(code, [x] + size + [b.scalar(BOOL, f) for f in flags[:n - 3]], [like(x)])[0]


# -- recurrent (float) ----------------------------------------------------------------------------

def start_of_rank(rank: int):
    """A start for a graph of one operation (``Family.start``): its input, of a type the
    operation takes at the level (None: none) and ``rank`` dimensions (small or wide), values in
    [-1, 1]. Without it a graph of a rank-2 or rank-3 operation alone often found no start that
    fits in its tries (a random start has that rank and a float type one time in 18)."""
    def start(b: Builder, code: Op) -> Tensor | None:
        types = sorted(primary_types(code, b.level, 0))
        return b.fresh(b.pick(types), b.start_shape(rank), low=-1.0, high=1.0) if types else None
    return start


def _rnn_cell(b: Builder, x: Tensor, batch: int, size: int, units: int) -> list:
    """Weights, recurrent weights, bias and hidden state of an RNN cell (model inputs or
    constants), weights scaled by the fan-in so the state stays in range; then a fuse code."""
    w = b.fresh(x.type, (units, size), low=-1 / np.sqrt(size), high=1 / np.sqrt(size))
    r = b.fresh(x.type, (units, units), low=-1 / np.sqrt(units), high=1 / np.sqrt(units))
    return [w, r, b.fresh(x.type, (units,), low=-0.5, high=0.5), b.fresh(x.type, (batch, units), low=-1, high=1),
            fuse(b, x)]


@declare([Op.RNN], ranks=(2,), start=start_of_rank(2))
def rnn(b: Builder, x: Tensor, code: Op) -> None:
    batch, size = x.shape
    b.add(code, [x] + _rnn_cell(b, x, batch, size, b.dim()), [like(x), like(x)])


@declare([Op.UNIDIRECTIONAL_SEQUENCE_RNN], ranks=(3,), start=start_of_rank(3))
def unidirectional_sequence_rnn(b: Builder, x: Tensor, code: Op) -> None:
    time_major = b.chance(0.5)
    batch = x.shape[1] if time_major else x.shape[0]
    outputs = [like(x)] * (2 if b.level >= 30 and b.chance(0.5) else 1)  # the final state from level 30
    b.add(code, [x] + _rnn_cell(b, x, batch, x.shape[2], b.dim()) + [b.scalar(INT32, int(time_major))], outputs)


@declare([Op.SVDF], ranks=(2,), start=start_of_rank(2))
def svdf(b: Builder, x: Tensor, code: Op) -> None:
    batch, size = x.shape
    rank, units, memory = int(b.rng.integers(1, 3)), b.dim(), int(b.rng.integers(1, 4))
    filters = rank * units
    ins = [x, b.fresh(x.type, (filters, size), low=-1 / np.sqrt(size), high=1 / np.sqrt(size)),
           b.fresh(x.type, (filters, memory), low=-1 / np.sqrt(memory), high=1 / np.sqrt(memory)),
           b.fresh(x.type, (units,), low=-0.5, high=0.5), b.fresh(x.type, (batch, memory * filters), low=-1, high=1),
           b.scalar(INT32, rank), fuse(b, x)]
    b.add(code, ins, [like(x), like(x)])


# -- quantization and casts -----------------------------------------------------------------------

@declare([Op.QUANTIZE])
def quantize(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [Out(b.pick(QUANT8))])


@declare([Op.DEQUANTIZE])
def dequantize(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [Out(b.pick(FLOATS))])


@declare([Op.CAST])
def cast(b: Builder, x: Tensor, code: Op) -> None:
    """To the output type of a form taking x's type (quant8 from other types with scale 1)."""
    target = pick_form(b, code, x).outputs[0]
    if target in (I32,) + QUANT8 and x.type in FLOATS and not far_from_integers(x):
        raise Reject("float to integer cast decided by a rounding difference")
    b.add(code, [x], [like(x) if target == x.type else Out(target, 1.0, 0) if target in QUANT8 else Out(target)])
