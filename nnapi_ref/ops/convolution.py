"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D.

Float convolutions are an im2col (a strided view of the padded input, copied once) followed by a
single BLAS matmul; a 1x1 stride-1 convolution is a plain matmul. Float16 is computed in float32
(as NNAPI's CPU implementation does); small problems are accumulated in float64, which costs
nothing there and keeps the result within float32 tolerance whatever the summation order.

Quantized convolutions accumulate exactly: the zero-point-corrected operands are small integers,
so a float64 BLAS product of them is exact (|sum| < 2**53), and is turned back into int64. The
accumulator plus bias (wrapped to int32 as the C implementation's int32 accumulator would) is
requantized with NNAPI's fixed-point multiplier (:mod:`.requantization`): real multiplier =
input_scale * filter_scale / output_scale, per output channel for per-channel quantized filters;
AOSP forms the product in float32 where TFLite forms it in double (the ``convention``). The
requantization is otherwise TFLite's: AOSP runs TFLite's kernels (optimized_ops::Conv and
DepthwiseConv for uint8, reference_integer_ops::ConvPerChannel / DepthwiseConvPerChannel for
int8 and per-channel filters), with the same MultiplyByQuantizedMultiplier.

Depthwise convolutions are one ``einsum`` over a strided view of the padded input's windows (see
:func:`depthwise_nhwc`).

The spatial-parameter helpers (padding schemes, output sizes, the layout flag) are shared with
the pooling operations.

AOSP and TFLite
---------------
The accumulation and the fixed-point requantization (MultiplyByQuantizedMultiplier, two
roundings) are the same; only the multiplier's derivation differs (:mod:`.requantization`).
AOSP multiplies the two float scales in float32 and divides in double for every convolution.
TFLite's int8 kernels, and any per-channel filter, use the per-channel multipliers of
PopulateConvolutionQuantizationParams, derived in double; its uint8 kernels with one filter
scale use the legacy scalar multiplier of GetQuantizedConvolutionMultipler, derived as AOSP's
(measured against TFLite for CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV_2D,
tests/test_diverge.py). GROUPED_CONV_2D has no TFLite kernel and takes the rule of the other
convolutions under the ``tflite`` convention.
"""
from __future__ import annotations

import functools

import numpy as np

from ..types import FuseCode, PaddingCode
from .base import Call, Operation, OperationCode, Signature, T, check, register
from ..types import DTYPES
from .common import FLOAT_ACTIVATION_RANGE, QUANT_RANGE, activation_range_quant, check_fuse_code
from . import requantization
from .requantization import multiply_by_quantized_multiplier, product_multipliers, wrap_int32

F32, F16, I32, BOOL = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.INT32, T.BOOL
Q8, S8, PC, TI32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32
QUANT8 = (Q8, S8)

# Below this many multiply-adds a float convolution is accumulated in float64. (At 2**22 it
# took a float64 path through a third of MobileNet v2's layers, ~10% of the inference.)
SMALL_FLOAT_WORK = 1 << 16

# ---------------------------------------------------------------------------------------------
# Spatial parameters shared by convolutions and pooling
# ---------------------------------------------------------------------------------------------


class Spatial:
    """Parsed spatial parameters of a convolution or pooling call (see :func:`parse_spatial`)."""

    __slots__ = ("explicit", "pads", "padding_code", "stride_w", "stride_h", "extra", "fuse", "nchw",
                 "dilation_w", "dilation_h")

    def __init__(self):
        self.explicit = False
        self.pads = (0, 0, 0, 0)  # left, right, top, bottom
        self.padding_code = None
        self.stride_w = self.stride_h = 1
        self.extra: list = []
        self.fuse = 0
        self.nchw = False
        self.dilation_w = self.dilation_h = 1


def parse_spatial(call: Call, name: str, base: int, n_extra: int, dilation: bool) -> Spatial:
    """Read the padding/stride/extra/fuse/layout/dilation scalars of a convolution or pooling.

    ``base`` is the index of the first scalar input; ``n_extra`` scalars (depth multiplier,
    number of groups, filter sizes) follow the strides. The explicit-padding form is recognised,
    as NNAPI does, by an INT32 where the implicit form would have its layout BOOL."""
    ins = call.ins
    n = len(ins)
    p = Spatial()
    layout_implicit = base + 4 + n_extra
    p.explicit = n >= base + 7 + n_extra and ins[layout_implicit].type == I32
    first_optional = base + (7 if p.explicit else 4) + n_extra
    n_optional = n - first_optional
    check(n_optional in ((0, 1, 3) if dilation else (0, 1)),
          f"{name}: {n} inputs: only one dilation factor given, both are required" if n_optional == 2
          else f"{name}: unexpected number of inputs {n}")
    if p.explicit:
        p.pads = tuple(int(ins[base + k].scalar()) for k in range(4))
        check(min(p.pads) >= 0, f"{name}: explicit paddings must be >= 0, got {list(p.pads)}")
        s = base + 4
    else:
        p.padding_code = int(ins[base].scalar())
        check(p.padding_code in (PaddingCode.SAME, PaddingCode.VALID),
              f"{name}: implicit padding scheme {p.padding_code} is not SAME (1) or VALID (2)")
        s = base + 1
    p.stride_w, p.stride_h = int(ins[s].scalar()), int(ins[s + 1].scalar())
    check(p.stride_w > 0 and p.stride_h > 0, f"{name}: strides must be > 0, got width {p.stride_w} "
                                             f"height {p.stride_h}")
    p.extra = [ins[s + 2 + k].scalar() for k in range(n_extra)]
    p.fuse = int(ins[s + 2 + n_extra].scalar())
    check_fuse_code(p.fuse)
    if n_optional >= 1:
        p.nchw = bool(ins[first_optional].scalar())
    if n_optional == 3:
        p.dilation_w = int(ins[first_optional + 1].scalar())
        p.dilation_h = int(ins[first_optional + 2].scalar())
        check(p.dilation_w > 0 and p.dilation_h > 0,
              f"{name}: dilation factors must be > 0, got width {p.dilation_w} height {p.dilation_h}")
    return p


def same_padding(in_size: int, stride: int, dilation: int, filter_size: int, transpose: bool = False):
    """NNAPI's SAME padding (head, tail) for one spatial dimension."""
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    total = (out_size - 1) * stride + effective - in_size
    head = max(total, 0) // 2
    tail = total - head if (total > 0 or transpose) else 0
    return head, tail


def resolve_padding(p: Spatial, in_h: int, in_w: int, filter_h: int, filter_w: int) -> None:
    """Turn an implicit padding scheme into explicit paddings, in place."""
    if p.explicit:
        return
    if p.padding_code == PaddingCode.SAME:
        left, right = same_padding(in_w, p.stride_w, p.dilation_w, filter_w)
        top, bottom = same_padding(in_h, p.stride_h, p.dilation_h, filter_h)
        p.pads = (left, right, top, bottom)
    else:
        p.pads = (0, 0, 0, 0)


def out_size(in_size: int, filter_size: int, stride: int, dilation: int, head: int, tail: int) -> int:
    effective = (filter_size - 1) * dilation + 1
    return (in_size - effective + stride + head + tail) // stride


def nhwc_dims(shape, nchw: bool):
    """(batches, height, width, channels) of a 4-D tensor in the given layout."""
    if nchw:
        return shape[0], shape[2], shape[3], shape[1]
    return shape[0], shape[1], shape[2], shape[3]


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x


def layout_shape(n, h, w, c, nchw: bool):
    return (n, c, h, w) if nchw else (n, h, w, c)


def padded_window_input(x: np.ndarray, top: int, left: int, need_h: int, need_w: int, fill=0) -> np.ndarray:
    """The NHWC input as seen by windows starting at padded row/col 0: ``need_h`` x ``need_w``
    padded rows/cols, input row r at padded row r + top, ``fill`` elsewhere."""
    n, h, w, c = x.shape
    if top == 0 and left == 0 and need_h <= h and need_w <= w:
        return x[:, :need_h, :need_w, :]
    xp = np.full((n, need_h, need_w, c), fill, dtype=x.dtype)
    r0, r1 = max(0, -top), min(h, need_h - top)
    c0, c1 = max(0, -left), min(w, need_w - left)
    if r1 > r0 and c1 > c0:
        xp[:, r0 + top:r1 + top, c0 + left:c1 + left, :] = x[:, r0:r1, c0:c1, :]
    return xp


def tap_slice(xp: np.ndarray, ky: int, kx: int, p_dh: int, p_dw: int, sh: int, sw: int, oh: int, ow: int):
    """The input seen by kernel tap (ky, kx) at every output position: a strided view."""
    y0, x0 = ky * p_dh, kx * p_dw
    return xp[:, y0:y0 + (oh - 1) * sh + 1:sh, x0:x0 + (ow - 1) * sw + 1:sw, :]


def im2col(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int) -> np.ndarray:
    """(N, OH, OW, KH, KW, C) windows of a padded NHWC input, as a strided view."""
    s0, s1, s2, s3 = xp.strides
    n, c = xp.shape[0], xp.shape[3]
    return np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3),
                                           writeable=False)


# ---------------------------------------------------------------------------------------------
# Quantization helpers
# ---------------------------------------------------------------------------------------------


def requantize(acc: np.ndarray, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier on int64 arrays holding int32 values, with per-channel
    (last axis) or single multiplier/shift arrays (the shared implementation in common)."""
    return multiply_by_quantized_multiplier(acc, multiplier, shift)


def filter_scales(flt, n_channels: int) -> np.ndarray:
    """Float32 filter scale(s): per channel for per-channel filters, else a 1-element array."""
    if flt.type == PC:
        return np.asarray(flt.channel_quant.scales, np.float32)
    return np.asarray([flt.scale], np.float32)


def output_multipliers(inp, flt, out, n_channels: int):
    """Per-output-channel (or single) fixed-point multipliers for a quantized convolution
    (the multiplier derivation of :func:`.requantization.product_multipliers`). TFLite's kernels
    form the scale product in double for int8 and per-channel filters (the per-channel arrays of
    PopulateConvolutionQuantizationParams) but in float32, as AOSP, for a uint8 convolution with
    one filter scale (the legacy scalar multiplier of GetQuantizedConvolutionMultipler)."""
    legacy_uint8 = inp.type == T.TENSOR_QUANT8_ASYMM and flt.type != PC
    return product_multipliers(inp.scale, filter_scales(flt, n_channels), out.scale,
                               tflite=requantization.FLOAT32_PRODUCT if legacy_uint8 else requantization.DOUBLE)


def check_quant_conv(name: str, inp, flt, bias, out, channel_dim: int, n_channels: int) -> None:
    """Quantization constraints shared by the quantized convolutions and FULLY_CONNECTED."""
    if inp.type not in QUANT8:
        return
    if flt.type == PC:
        cq = flt.channel_quant
        check(cq is not None, f"{name}: per-channel filter has no channel quantization parameters")
        check(cq.channel_dim == channel_dim,
              f"{name}: per-channel filter must be quantized along dimension {channel_dim}, got {cq.channel_dim}")
        check(len(cq.scales) == n_channels,
              f"{name}: per-channel filter has {len(cq.scales)} scales for {n_channels} channels")
        check(all(s > 0 for s in cq.scales), f"{name}: per-channel filter scales must be > 0")
        check(bias.zero_point == 0, f"{name}: bias zero point must be 0, got {bias.zero_point}")
    else:
        product = float(np.float32(inp.scale) * np.float32(flt.scale))
        bias_scale = float(np.float32(bias.scale))
        check(abs(product - bias_scale) <= 1e-6 * min(product, bias_scale),
              f"{name}: bias scale {bias.scale} must equal input scale * filter scale = {product}")
        check(bias.zero_point == 0, f"{name}: bias zero point must be 0, got {bias.zero_point}")
    check(out.scale > 0, f"{name}: output scale must be > 0, got {out.scale}")


# Largest requantization table (entries over all channels) worth building.
LUT_LIMIT = 1 << 20
# Accumulators with at least this many elements try the float32 affine requantization.
AFFINE_MIN_SIZE = 1 << 12


@functools.lru_cache(maxsize=512)
def _requant_table(mult_bytes: bytes, shift_bytes: bytes, zero_point: int, lo: int, hi: int, dtype: str):
    """The clamped requantization q(a) = clip(requantize(a) + zero_point, lo, hi) as a table.

    q is non-decreasing in a, so it is constant (lo, resp. hi) below a_lo, resp. above a_hi;
    the table holds q over [a_lo, a_hi] per channel, each channel at offset c * stride. Returns
    (flat table, a_lo per channel, stride, span per channel) or None when too large."""
    mult = np.frombuffer(mult_bytes, np.int64)
    shift = np.frombuffer(shift_bytes, np.int64)
    real = mult.astype(np.float64) * np.exp2(shift.astype(np.float64) - 31)
    if np.any(real <= 0):
        return None
    a_lo = np.floor((lo - zero_point - 1) / real) - 2
    a_hi = np.ceil((hi - zero_point + 1) / real) + 2
    if a_lo.min() < -2.0 ** 31 or a_hi.max() >= 2.0 ** 31:
        return None
    span = (a_hi - a_lo).astype(np.int64)
    stride = int(span.max()) + 1
    if stride * len(mult) > LUT_LIMIT:
        return None
    a_lo = a_lo.astype(np.int64)
    grid = a_lo[:, None] + np.arange(stride, dtype=np.int64)[None, :]
    q = requantize(grid.copy(), mult[:, None], shift[:, None]) + zero_point
    ends = np.stack([q[np.arange(len(mult)), 0], q[np.arange(len(mult)), span]], 1)
    if np.any(ends[:, 0] > lo) or np.any(ends[:, 1] < hi):
        return None  # the estimate of the saturation points missed: use the direct path
    table = np.clip(q, lo, hi).astype(dtype).reshape(-1)
    return table, a_lo, stride, span


# Raw accumulators summed exactly in float32 stay below this magnitude.
FLOAT32_EXACT = (1 << 24) - 1


def _step_points(mult, shift, zero_point, lo, hi, bias, limit):
    """The points that pin down a = raw accumulator -> q(a + bias) on |a| <= ``limit`` (kept
    where a + bias is an int32): per channel, both ends of the range and, for every level q takes
    above its value at the low end, the first a reaching it and the a just before. Found by a
    vectorized binary search per (channel, level): q is non-decreasing in a. Returns the channel,
    a and the exact q(a + bias) of every point."""
    top = (1 << 31) - 1
    a_min = np.maximum(-limit, -top - bias)
    a_max = np.minimum(limit, top - bias)
    chans = np.flatnonzero(a_min <= a_max)

    def q(ch, a):  # exact, element by element with each point's channel parameters
        return np.clip(requantize(a + bias[ch], mult[ch], shift[ch]) + zero_point, lo, hi)

    q_min, q_max = q(chans, a_min[chans]), q(chans, a_max[chans])
    counts = q_max - q_min
    ch = np.repeat(chans, counts)
    level = np.repeat(q_min + 1 - (np.cumsum(counts) - counts), counts) + np.arange(ch.size)
    below, reached = a_min[ch], a_max[ch]  # q(below) < level <= q(reached)
    while True:
        open_ = reached - below > 1
        if not open_.any():
            break
        mid = (below + reached) // 2
        up = q(ch, mid) >= level
        reached = np.where(open_ & up, mid, reached)
        below = np.where(open_ & ~up, mid, below)
    point_ch = np.concatenate([chans, chans, ch, ch])
    point_a = np.concatenate([a_min[chans], a_max[chans], reached, reached - 1])
    return point_ch, point_a, q(point_ch, point_a)


@functools.lru_cache(maxsize=512)
def _requant_affine(mult_bytes: bytes, shift_bytes: bytes, zero_point: int, lo: int, hi: int, dtype: str,
                    bias_bytes: bytes, limit: int = FLOAT32_EXACT):
    """Parameters (r, c, low, high, t0, step) per output channel, float32 if possible else
    float64, such that for every integer accumulator a with |a| <= ``limit`` (< 2**24: exact in
    float32) and a + bias an int32, G(a) = uint8(:func:`affine_values` (a)) (then ^ 0x80 for int8
    outputs), i.e.

        t = a * r + c;  t += clip(t - t0, 0, step);  clip(t, low, high)

    computed in r's precision, equals the exact clamped requantization q(a + bias); None when
    that cannot be proven. The bias (any int32: it is folded into c) and the multipliers are per
    channel; step is None when no channel needs it.

    Exactly, q(a) - zero_point = floor(v * real + 1/2 +- nudge) with v = a + bias, where
    nudge = 2**-(rs+1) for a right shift rs > 0 (SRDHM rounds half up, then RoundingDivideByPOT
    rounds half away from zero: the sign is that of v), 0 without one. A channel whose steps all
    lie on one side of v = 0 (ReLU-like outputs) is one affine function; one with steps on both
    sides starts from the negative side's offset and adds 2 * nudge in a narrow ramp just above
    t0 = zero_point + 1/2, where v crosses 0 and no step lies.

    G is non-decreasing in a (IEEE rounding is monotone), and so is q, so they agree on the whole
    range iff they agree at its ends and on both sides of every step of q (:func:`_step_points`:
    at most hi - lo steps per channel), checked with the very same numpy operations the fast path
    uses. Float32 is exact enough when the steps lie at small |a * r| relative to 1 / r; tiny
    multipliers or large biases (per-channel real models) need float64."""
    bias = np.frombuffer(bias_bytes, np.int64)
    n_ch = len(bias)
    mult = np.broadcast_to(np.frombuffer(mult_bytes, np.int64), (n_ch,))
    shift = np.broadcast_to(np.frombuffer(shift_bytes, np.int64), (n_ch,))
    if np.any(mult < 0):
        return None
    real = mult.astype(np.float64) * np.exp2(shift.astype(np.float64) - 31)
    ch, a, want = _step_points(mult, shift, zero_point, lo, hi, bias, min(int(limit), FLOAT32_EXACT))
    base = 0 if dtype == np.dtype(np.uint8).str else -128  # G computes q - base, in [0, 255]
    want = want - base
    points = a.astype(np.float32)
    rs = np.maximum(-shift, 0).astype(np.float64)
    nudge = np.where(rs > 0, np.exp2(-rs - 1), 0.0)
    centre = bias * real + (zero_point + 0.5 - base)

    def wrong_per_channel(params):
        r, c, low, high, t0, step = params
        g = affine_values(points, r[ch], c[ch], low, high, t0, None if step is None else step[ch])
        return np.bincount(ch, g.astype(np.uint8).astype(np.int64) != want, minlength=n_ch)

    for ftype in (np.float32, np.float64):
        low, high = ftype(lo - base), ftype(hi - base)
        r = real.astype(ftype)
        chosen, settled = np.zeros(n_ch, ftype), np.zeros(n_ch, bool)
        for sign in (1, -1):
            c = (centre + sign * nudge).astype(ftype)
            take = (wrong_per_channel((r, c, low, high, None, None)) == 0) & ~settled
            chosen[take] = c[take]
            settled |= take
        if settled.all():
            return r, chosen, low, high, None, None
        c = np.where(settled, chosen, (centre - nudge).astype(ftype))
        step = np.where(settled, 0, 2 * nudge).astype(ftype)
        params = (r, c, low, high, ftype(zero_point - base + 0.5), step)
        if not wrong_per_channel(params).any():
            return params
    return None


def affine_values(acc: np.ndarray, r, c, low, high, t0=None, step=None, in_place: bool = False) -> np.ndarray:
    """The float values of the affine requantization (see :func:`_requant_affine`) of exact
    integer accumulators in float32 ``acc``, in r's precision; ``in_place`` may reuse ``acc``."""
    if in_place and np.result_type(r) == np.float32:
        t = acc
        t *= r
    else:
        t = np.multiply(acc, r, dtype=np.result_type(r))
    t += c
    if step is not None:
        ramp = t - t0
        np.clip(ramp, 0, step, out=ramp)
        t += ramp
    np.clip(t, low, high, out=t)
    return t


def apply_affine(acc: np.ndarray, params, out: np.ndarray) -> None:
    """``out`` (uint8) = the affine requantization ``params`` (from :func:`_requant_affine`) of
    exact integer accumulators in float32 ``acc`` (may be overwritten)."""
    np.copyto(out, affine_values(acc, *params, in_place=True), casting="unsafe")


def finish_quant(acc: np.ndarray, bias: np.ndarray, mult, shift, out, fuse: int,
                 bound: float | None = None) -> np.ndarray:
    """Accumulator (..., C) holding integers (int or exact float) + int32 bias -> requantized,
    offset, clamped output (may overwrite ``acc``). ``bound`` bounds |accumulator| when known:
    no int32 wrap-around is then possible and the table path can be used."""
    lo, hi = activation_range_quant(fuse, out)
    dtype = DTYPES[out.type]
    bias = bias.astype(np.int64)
    n_ch = acc.shape[-1] if acc.ndim else 1
    mult = np.broadcast_to(np.asarray(mult, np.int64), (n_ch,)) if np.size(mult) > 1 else np.asarray(mult, np.int64).reshape(1)
    shift = np.broadcast_to(np.asarray(shift, np.int64), (n_ch,)) if np.size(shift) > 1 else np.asarray(shift, np.int64).reshape(1)
    max_bias = float(np.abs(bias).max(initial=0))
    if bound is not None and bound <= FLOAT32_EXACT and bound + max_bias < 2.0 ** 31 and acc.dtype == np.float32 \
            and acc.ndim and acc.shape[-1] == bias.size and acc.size >= AFFINE_MIN_SIZE:
        limit = min(FLOAT32_EXACT, 1 << max(0, int(bound)).bit_length())  # a power of two: few cache entries
        affine = _requant_affine(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                                 int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str, bias.tobytes(), limit)
        if affine is not None:
            if not acc.flags.writeable:
                acc = acc.copy()
            q = np.empty(acc.shape, np.uint8)
            apply_affine(acc, affine, q)
            if dtype == np.int8:
                q ^= np.uint8(0x80)
                q = q.view(np.int8)
            return q
    if bound is not None and bound + max_bias < 2.0 ** 31:
        lut = _requant_table(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                             int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str)
        if lut is not None:
            table, a_lo, stride, span = lut
            per_channel = len(a_lo) > 1
            base = np.arange(n_ch, dtype=np.int64) * stride if per_channel else 0
            offset = bias - a_lo + base  # index of accumulator value a in channel c: a + offset[c]
            top = base + span
            exact_limit = 2.0 ** 24 if acc.dtype == np.float32 else 2.0 ** 31
            if bound + float(np.abs(offset).max(initial=0)) < exact_limit and acc.dtype in (np.float32, np.float64,
                                                                                             np.int32, np.int64):
                if not acc.flags.writeable:
                    acc = acc.copy()
                acc += offset.astype(acc.dtype)
                np.clip(acc, base, top, out=acc)
                return table.take(acc.astype(np.intp))  # intp indices: take's fast path
    acc = acc.astype(np.int64)
    acc += bias
    if bound is None or bound + max_bias >= 2.0 ** 31:
        acc = wrap_int32(acc)
    q = requantize(acc, mult if n_ch > 1 and mult.size > 1 else mult.reshape(()),
                   shift if n_ch > 1 and shift.size > 1 else shift.reshape(()))
    q += out.zero_point
    np.clip(q, lo, hi, out=q)
    return q.astype(dtype)


def float_activation(acc: np.ndarray, fuse: int, out) -> np.ndarray:
    """Fused activation of a float accumulator (in place) and cast to the output type."""
    lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(fuse)]
    if fuse != FuseCode.NONE:
        np.clip(acc, lo, hi, out=acc)
    return acc.astype(DTYPES[out.type], copy=False)


def float_dtype(work: int):
    return np.float64 if work < SMALL_FLOAT_WORK else np.float32


def quant_magnitudes(inp, flt) -> tuple[int, int]:
    """Largest |value - zero point| of a quantized input and filter (bounds the accumulator)."""
    x, w = inp.value, flt.value
    if x.size == 0 or w.size == 0:
        return 0, 0
    zx = inp.zero_point
    zw = 0 if flt.type == PC else flt.zero_point
    mx = max(abs(int(x.max()) - zx), abs(int(x.min()) - zx))
    mw = max(abs(int(w.max()) - zw), abs(int(w.min()) - zw))
    return mx, mw


def accumulator_type(call: Call, reduction: int, float_work: int):
    """(dtype, bound) for a matmul-based convolution accumulating ``reduction`` products:
    quantized operands use float32 where every partial sum is exact (< 2**24), else float64."""
    if call.ins[0].type in QUANT8:
        mx, mw = quant_magnitudes(call.ins[0], call.ins[1])
        bound = float(reduction) * mx * mw
        return (np.float32 if bound < 2.0 ** 24 else np.float64), bound
    return float_dtype(float_work), None


def operand_values(inp, flt, dtype):
    """Input and filter values ready to multiply: zero-point-corrected for quantized types."""
    if inp.type in QUANT8:
        x = inp.value.astype(dtype)
        if inp.zero_point:
            x -= inp.zero_point
        w = flt.value.astype(dtype)
        if flt.type != PC and flt.zero_point:
            w -= flt.zero_point
        return x, w
    return inp.value.astype(dtype, copy=False), flt.value.astype(dtype, copy=False)


def finish(acc: np.ndarray, call: Call, fuse: int, n_channels: int, bound: float | None = None) -> np.ndarray:
    """Accumulator (N, OH, OW, C) -> output values of the output's type (NHWC); may overwrite
    ``acc``. ``bound`` bounds the quantized accumulator's magnitude (before bias)."""
    inp, flt, bias, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
    if inp.type in QUANT8:
        mult, shift = output_multipliers(inp, flt, out, n_channels)
        return finish_quant(acc, bias.value, mult, shift, out, fuse, bound)
    if acc.dtype != np.float32 or not acc.flags.writeable or not acc.flags.c_contiguous:
        acc = acc.astype(np.float32)
    acc += bias.value.astype(np.float32)
    return float_activation(acc, fuse, out)


# ---------------------------------------------------------------------------------------------
# Prepared fast paths (CONV_2D, DEPTHWISE_CONV_2D)
# ---------------------------------------------------------------------------------------------
#
# Weights are prepared once per compiled operation (Call.derived: filters as the matmul wants
# them, zero-point corrected, bias folded with the input zero point, requantization parameters),
# and the output is computed by blocks of output rows: each block's accumulator is still in the
# cache while the epilogue (bias, activation, requantization, cast) makes its passes over it.
#
# Quantized fast path: the input is used as is (not zero-point corrected) and its zero point is
# folded into the bias, exactly: sum((x - zx) * w') + bias = sum(x * w') + (bias - zx * sum(w'))
# with w' the corrected filter, padding with zx (i.e. 0 once corrected). Both sides are the same
# integer; the raw accumulator sum(x * w') is exact in float32 while bound_raw < 2**24, and the
# float32 affine requantization (proven exact for the folded bias by _requant_affine) finishes.
# Anything else (no proof, larger accumulators) takes the general path.

# Float32 elements of one block (accumulator + input columns). Small blocks (L2-sized) measured
# slower on the shared 2-core machine (per-block overhead, contested cache): blocks only bound the
# temporaries of large inputs.
BLOCK_ELEMENTS = 1 << 21


def _row_blocks(rows: int, row_elements: int):
    step = max(1, BLOCK_ELEMENTS // max(1, row_elements))
    return [(r, min(r + step, rows)) for r in range(0, rows, step)]


class _QuantPrep:
    """Prepared quantized weights and requantization of one convolution (see above)."""

    __slots__ = ("weights", "mw", "bias_eff", "max_bias", "affine", "affine_limit", "table", "max_offset",
                 "signed")


def prepare_quant(call: Call, weights_int: np.ndarray, wsum: np.ndarray, n_channels: int, fuse: int,
                  reduction: int, matrix_dtype=np.float32) -> _QuantPrep:
    """``weights_int``: zero-point corrected int64 filter in the layout the kernel uses;
    ``wsum``: its per-output-channel sums; ``reduction``: products per output element."""
    inp, flt, bias, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
    prep = _QuantPrep()
    prep.mw = int(np.abs(weights_int).max(initial=0))
    prep.weights = weights_int.astype(matrix_dtype)
    b = bias.value.astype(np.int64)
    prep.bias_eff = b - np.int64(inp.zero_point) * wsum.astype(np.int64)
    prep.max_bias = float(np.abs(b).max(initial=0))
    # The raw accumulator sum(x * w') over any input of this type (padding included) is bounded by:
    qmin, qmax = QUANT_RANGE[inp.type]
    prep.affine_limit = min(FLOAT32_EXACT, reduction * max(abs(qmin), abs(qmax)) * prep.mw)
    mult, shift = output_multipliers(inp, flt, out, n_channels)
    lo, hi = activation_range_quant(fuse, out)
    dtype = DTYPES[out.type]
    mult = np.broadcast_to(mult, (n_channels,)) if mult.size > 1 else mult.reshape(1)
    shift = np.broadcast_to(shift, (n_channels,)) if shift.size > 1 else shift.reshape(1)
    prep.affine = _requant_affine(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                                  int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str, prep.bias_eff.tobytes(),
                                  prep.affine_limit)
    prep.signed = dtype == np.int8
    prep.table, prep.max_offset = None, 0.0
    if prep.affine is None:
        lut = _requant_table(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                             int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str)
        if lut is not None:
            table, a_lo, stride, span = lut
            per_channel = len(a_lo) > 1
            base = np.arange(n_channels, dtype=np.int64) * stride if per_channel else np.zeros(1, np.int64)
            # Index of accumulator value a (folded bias included) in channel c: a + offset[c].
            offset = np.broadcast_to(prep.bias_eff - a_lo + base, (n_channels,))
            prep.max_offset = float(np.abs(offset).max(initial=0))
            if per_channel:
                low, high = base.astype(np.float32), (base + span).astype(np.float32)
            else:  # scalar bounds: np.clip is several times faster with them
                low, high = np.float32(0), np.float32(span[0])
            prep.table = (table.view(np.uint8), offset.astype(np.float32), low, high)
    return prep


def quant_fast_ok(prep: _QuantPrep, inp, reduction: int, padded: bool) -> bool:
    """Whether the folded float32 path is exact for this input (bounds from its values)."""
    if prep.affine is None and prep.table is None:
        return False
    x = inp.value
    if x.size == 0:
        return False
    xmin, xmax = int(x.min()), int(x.max())
    zx = inp.zero_point
    raw = max(abs(xmin), abs(xmax), abs(zx) if padded else 0)
    corrected = max(abs(xmax - zx), abs(xmin - zx))
    bound = float(reduction) * raw * prep.mw
    if float(reduction) * corrected * prep.mw + prep.max_bias >= 2.0 ** 31:
        return False
    if prep.affine is not None:
        return bound <= prep.affine_limit
    return bound + prep.max_offset < 2.0 ** 24


def requant_params(prep: _QuantPrep):
    """The per-channel arrays of the block requantization (affine, else table)."""
    if prep.affine is not None:
        r, c, *rest = prep.affine
        r = np.broadcast_to(r, c.shape)
        if np.all(r == r[0]):
            r = r[0]  # one multiplier (per-tensor filter): a scalar multiplies faster
        return [r, c, *rest]
    _, offset, base, top = prep.table
    return [offset, base, top]


def requant_block(acc: np.ndarray, params, prep: _QuantPrep, out_block: np.ndarray) -> None:
    """Requantization of one block of exact raw accumulators (in place in ``acc``) into
    ``out_block`` (uint8 storage). Affine: multiply, add, clip, cast (int8 outputs are computed
    offset by 128 and flipped back with ^ 0x80). Table: index, clip, look up."""
    if prep.affine is not None:
        apply_affine(acc, params, out_block)
        if prep.signed:
            np.bitwise_xor(out_block, np.uint8(0x80), out=out_block)
        return
    offset, base, top = params
    acc += offset
    np.clip(acc, base, top, out=acc)
    prep.table[0].take(acc.astype(np.intp), out=out_block)


def _float_block(acc: np.ndarray, bias, lo, hi, fuse: int) -> None:
    acc += bias
    if fuse != FuseCode.NONE:
        np.clip(acc, lo, hi, out=acc)


def conv2d_fast(call: Call, p: Spatial, dims, kernel, out_hw, c_out):
    """CONV_2D through the prepared path (NHWC result), or None when it does not apply."""
    inp, flt = call.ins[0], call.ins[1]
    n, h, w, c = dims
    kh, kw = kernel
    oh, ow = out_hw
    K = kh * kw * c
    quant = inp.type in QUANT8
    if quant:
        def compute():
            wi = flt.value.reshape(c_out, K).astype(np.int64)
            if flt.type != PC and flt.zero_point:
                wi -= flt.zero_point
            return prepare_quant(call, np.ascontiguousarray(wi.T), wi.sum(axis=1), c_out, p.fuse, K)
        prep = call.derived(("conv_quant",), range(1, len(call.ins)), compute)
        padded = any(p.pads)
        if not quant_fast_ok(prep, inp, K, padded):
            return None
        wmat = prep.weights
    elif inp.type == F32 and float_dtype(n * oh * ow * c_out * K) == np.float32:
        wmat = call.derived(("conv_f32",), (1,),
                            lambda: np.ascontiguousarray(flt.value.reshape(c_out, K).T.astype(np.float32)))
        lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(p.fuse)]
    else:
        return None
    x = to_nhwc(inp.value, p.nchw)
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and left == 0 and top == 0 and oh == h and ow == w:
        win = x.reshape(n, oh, ow, 1, 1, c)
    else:
        need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = padded_window_input(x, top, left, need_h, need_w, inp.zero_point if quant else 0)
        win = im2col(xp, kh, kw, sh, sw, dh, dw, oh, ow)
    # Epilogues run on output rows of OW * C_out elements, with the per-channel parameters tiled
    # to match: numpy's inner loops are then long (1.3x faster than per-channel broadcasting).
    if quant:
        out = np.empty((n, oh, ow, c_out), np.uint8)
        params = call.derived(("conv_params", ow), range(1, len(call.ins)),
                              lambda: [np.tile(a, ow) if np.ndim(a) else a for a in requant_params(prep)])
    else:
        out = np.empty((n, oh, ow, c_out), np.float32)
        bias = call.derived(("bias_f32", ow), (2,), lambda: np.tile(call.ins[2].value.astype(np.float32), ow))
    for b in range(n):
        for y0, y1 in _row_blocks(oh, ow * (K + c_out)):
            cols = win[b, y0:y1].reshape(-1, K)
            ob = out[b, y0:y1].reshape(y1 - y0, ow * c_out)
            if quant:
                requant_block(np.matmul(cols.astype(np.float32), wmat).reshape(ob.shape), params, prep, ob)
            else:
                np.matmul(cols, wmat, out=ob.reshape(-1, c_out))
                _float_block(ob, bias, lo, hi, p.fuse)
    if quant and prep.signed:
        out = out.view(np.int8)
    return out


def _phase_rows(x: np.ndarray, r0: int, r1: int, top: int, left: int, sw: int, phases: int, width: int, fill,
                dtype) -> np.ndarray:
    """Padded rows r0..r1 of the NHWC input converted to ``dtype``, their columns split by phase
    modulo the horizontal stride: ``buf[:, r, ph, j] = padded[:, r0 + r, j * sw + ph]`` for
    ``width`` columns j per phase, ``fill`` outside the input. With one phase, the padded rows."""
    n, h, w, c = x.shape
    buf = np.empty((n, r1 - r0, phases, width, c), dtype)
    i0, i1 = max(r0 - top, 0), min(r1 - top, h)
    b0, b1 = max(i0 + top - r0, 0), max(i1 + top - r0, 0)
    if i1 <= i0:
        buf[...] = fill
        return buf
    buf[:, :b0] = fill
    buf[:, b1:] = fill
    for ph in range(phases):
        # Phase columns j whose input column j * sw + ph - left is inside the input.
        j0 = min(width, max(0, -((ph - left) // sw)))
        j1 = max(j0, min(width, (w - 1 - ph + left) // sw + 1))
        dst = buf[:, b0:b1, ph]
        if j1 > j0:
            first = j0 * sw + ph - left
            dst[:, :, j0:j1] = x[:, i0:i1, first:first + (j1 - j0 - 1) * sw + 1:sw]
        dst[:, :, :j0] = fill
        dst[:, :, j1:] = fill
    return buf


def _tap_layout(kw: int, sw: int, dw: int):
    """Where kernel column j reads in :func:`_phase_rows`'s layout, for a flattened einsum:
    (phases, taps per phase M, column step, [(phase, m) for each j]); tap (phase, m) of output
    column x reads phase column x + m * step. Needs sw == 1 or dw == 1."""
    if sw == 1:
        return 1, kw, dw, [(0, j) for j in range(kw)]
    return min(sw, kw), -(-kw // sw), 1, [(j % sw, j // sw) for j in range(kw)]


def _tap_grid(wt: np.ndarray, taps, phases: int, m: int, ow: int) -> np.ndarray:
    """(KH, KW, C) weights as the (KH, phases, M, OW * C) grid the flattened einsum multiplies
    by, tiled along the output row; zero at (phase, m) pairs no kernel column maps to."""
    kh, _, c = wt.shape
    grid = np.zeros((kh, phases, m, c), wt.dtype)
    for j, (ph, k) in enumerate(taps):
        grid[:, ph, k] = wt[:, j]
    return np.tile(grid, (1, 1, 1, ow))


def depthwise_fast(call: Call, p: Spatial, dims, kernel, out_hw, c_out):
    """DEPTHWISE_CONV_2D through the prepared path (NHWC result), or None when it does not apply.

    One einsum per block of output rows, with the width and channel axes of an output row
    flattened into one long axis (OW * C elements: einsum's inner loop) and the weights tiled
    along it. For a horizontal stride > 1 the padded input columns are first split by phase
    (column modulo stride), so that the columns one kernel tap reads for consecutive outputs are
    again adjacent: a stride-2 3-wide kernel becomes a 2-phase x 2-tap grid with one zero weight.
    (Horizontal stride and dilation both > 1 take the general path.)"""
    inp, flt = call.ins[0], call.ins[1]
    n, h, w, c = dims
    kh, kw = kernel
    oh, ow = out_hw
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if sw > 1 and dw > 1:
        return None
    phases, m, step, taps = _tap_layout(kw, sw, dw)
    quant = inp.type in QUANT8
    if quant:
        def compute():
            wi = flt.value[0].astype(np.int64)  # (KH, KW, C_out)
            if flt.type != PC and flt.zero_point:
                wi -= flt.zero_point
            return prepare_quant(call, wi, wi.sum(axis=(0, 1)), c_out, p.fuse, kh * kw)
        prep = call.derived(("dw_quant",), range(1, len(call.ins)), compute)
        if not quant_fast_ok(prep, inp, kh * kw, any(p.pads)):
            return None
        grid, params = call.derived(("dw_grid", ow), range(1, len(call.ins)),
                                    lambda: (_tap_grid(prep.weights, taps, phases, m, ow),
                                             [np.tile(a, ow) if np.ndim(a) else a for a in requant_params(prep)]))
        fill = inp.zero_point
    elif inp.type == F32:
        lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(p.fuse)]
        grid, bias = call.derived(("dw_f32", ow), (1, 2),
                                  lambda: (_tap_grid(flt.value[0].astype(np.float32), taps, phases, m, ow),
                                           np.tile(call.ins[2].value.astype(np.float32), ow)))
        fill = 0
    else:
        return None
    x = to_nhwc(inp.value, p.nchw)
    mult = c_out // c
    if mult > 1:
        x = np.repeat(x, mult, axis=3)
    left, _, top, _ = p.pads
    width = ow + (m - 1) * step  # phase columns read by a row of outputs
    out = np.empty((n, oh, ow, c_out), np.uint8 if quant else np.float32)
    row_elements = n * (ow * c_out * 2 + sh * phases * width * c_out)
    for y0, y1 in _row_blocks(oh, row_elements):
        rows = y1 - y0
        r0, r1 = y0 * sh, (y1 - 1) * sh + (kh - 1) * dh + 1
        xb = _phase_rows(x, r0, r1, top, left, sw, phases, width, fill, np.float32)
        s0, s1, s2, s3, s4 = xb.strides
        wins = np.lib.stride_tricks.as_strided(xb, (n, rows, kh, phases, m, ow * c_out),
                                               (s0, s1 * sh, s1 * dh, s2, s3 * step, s4), writeable=False)
        ob = out[:, y0:y1].reshape(n, rows, ow * c_out)
        if quant:
            requant_block(np.einsum("nyipmk,ipmk->nyk", wins, grid), params, prep, ob)
        else:
            np.einsum("nyipmk,ipmk->nyk", wins, grid, out=ob)
            _float_block(ob, bias, lo, hi, p.fuse)
    if quant and prep.signed:
        out = out.view(np.int8)
    return out


# ---------------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------------

def _typed(level, scalars, tail=(), optional=0, by_level=None):
    """Signatures for (input, filter, bias) type triples by level, followed by ``scalars``."""
    sigs = []
    for lvl, triples in by_level.items():
        for (a, f, b) in triples:
            sigs.append(Signature(max(lvl, level), [a, f, b, *scalars, *tail], [a], optional=optional))
    return sigs


def conv_signatures(n_explicit: int, n_implicit: int, optional_from_29: bool, min_level: int = 27,
                    implicit_head=None, always_tail=()):
    """Signatures of a convolution with ``n_explicit``/``n_implicit`` INT32 scalars."""
    base27 = [(F32, F32, F32), (Q8, Q8, TI32)]
    base29 = [(F16, F16, F16), (Q8, PC, TI32)]
    base30 = [(S8, S8, TI32), (S8, PC, TI32)]
    explicit = [I32] * n_explicit
    implicit = (implicit_head or []) + [I32] * (n_implicit - len(implicit_head or []))
    sigs = []
    opt_tail = [BOOL, I32, I32]  # layout, then both dilation factors or neither
    for scalars in (explicit, implicit):
        if optional_from_29:
            sigs += _typed(27, scalars, by_level={27: base27})
            sigs += _typed(29, scalars, opt_tail, (0, 2, 3), {27: base27, 29: base29})
            sigs += _typed(30, scalars, opt_tail, (0, 2, 3), {30: base30})
        else:
            sigs += _typed(min_level, scalars, always_tail, 0, {27: base27, 29: base29})
            sigs += _typed(30, scalars, always_tail, 0, {30: base30})
    return sigs


# ---------------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------------


def _check_tensor_ranks(name, inp, flt, bias):
    check(inp.rank == 4, f"{name}: input must be 4-D, got rank {inp.rank}")
    check(flt.rank == 4, f"{name}: filter must be 4-D, got rank {flt.rank}")
    check(bias.rank == 1, f"{name}: bias must be 1-D, got rank {bias.rank}")


def _check_padding_vs_filter(name, p: Spatial, kh, kw):
    eh = (kh - 1) * p.dilation_h + 1
    ew = (kw - 1) * p.dilation_w + 1
    left, right, top, bottom = p.pads
    check(left < ew and right < ew and top < eh and bottom < eh,
          f"{name}: paddings {list(p.pads)} must be smaller than the effective filter size "
          f"(width {ew}, height {eh})")


class _Conv(Operation):
    base = 3
    n_extra = 0
    dilation = True

    def params(self, call: Call) -> Spatial:
        return parse_spatial(call, self.name, self.base, self.n_extra, self.dilation)

    def geometry(self, call: Call):
        """Validate; return (params, (N, H, W, C), (KH, KW), (OH, OW), C_out). Remembered per
        input shape when every other input is a constant (the operand types, scales and zero
        points are fixed for the compiled operation); the result must not be modified."""
        return call.derived(("geometry", call.ins[0].shape), range(1, len(call.ins)), lambda: self._geometry(call))

    def _geometry(self, call: Call):
        inp, flt, bias, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        name = self.name
        _check_tensor_ranks(name, inp, flt, bias)
        p = self.params(call)
        n, h, w, c = nhwc_dims(inp.shape, p.nchw)
        kh, kw = flt.shape[1], flt.shape[2]
        check(h > 0 and w > 0 and c > 0, f"{name}: input height, width and depth must be > 0, got {inp.shape}")
        check(kh > 0 and kw > 0, f"{name}: filter height and width must be > 0, got {flt.shape}")
        c_out = self.check_channels(call, p, c)
        check(bias.shape[0] == c_out, f"{name}: bias has {bias.shape[0]} elements for {c_out} output channels")
        check_quant_conv(name, inp, flt, bias, out, self.channel_dim, c_out)
        resolve_padding(p, h, w, kh, kw)
        _check_padding_vs_filter(name, p, kh, kw)
        left, right, top, bottom = p.pads
        oh = out_size(h, kh, p.stride_h, p.dilation_h, top, bottom)
        ow = out_size(w, kw, p.stride_w, p.dilation_w, left, right)
        check(oh > 0 and ow > 0, f"{name}: output would be {oh}x{ow}: the filter does not fit the padded input")
        return p, (n, h, w, c), (kh, kw), (oh, ow), c_out

    def infer(self, call: Call):
        p, (n, _, _, _), _, (oh, ow), c_out = self.geometry(call)
        return [layout_shape(n, oh, ow, c_out, p.nchw)]


@register
class Conv2D(_Conv):
    code = OperationCode.CONV_2D
    signatures = conv_signatures(7, 4, optional_from_29=True)
    channel_dim = 0

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        check(flt.shape[3] == c, f"{self.name}: filter depth {flt.shape[3]} != input depth {c}")
        check(flt.shape[0] > 0, f"{self.name}: filter must have > 0 output channels")
        return flt.shape[0]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        fast = conv2d_fast(call, p, (n, h, w, c), (kh, kw), (oh, ow), c_out)
        if fast is not None:
            return [from_nhwc(fast, p.nchw)]
        dtype, bound = accumulator_type(call, kh * kw * c, n * oh * ow * c_out * kh * kw * c)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        acc = conv2d_nhwc(x, wt, p, kh, kw, oh, ow)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def conv2d_nhwc(x, wt, p: Spatial, kh, kw, oh, ow, groups: int = 1) -> np.ndarray:
    """Accumulator of a (grouped) convolution: x (N, H, W, C), wt (O, KH, KW, C / groups)."""
    n, h, w, c = x.shape
    c_out = wt.shape[0]
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if groups == 1 and kh == 1 and kw == 1 and sh == 1 and sw == 1 and left == 0 and top == 0 \
            and oh == h and ow == w:
        cols = x.reshape(n * h * w, c)
    else:
        need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = padded_window_input(x, top, left, need_h, need_w)
        if kh == 1 and kw == 1:
            cols = xp[:, ::sh, ::sw, :][:, :oh, :ow, :]
        else:
            cols = im2col(xp, kh, kw, sh, sw, dh, dw, oh, ow)
        if groups > 1:
            cg = c // groups
            cols = cols.reshape(n * oh * ow, kh * kw, groups, cg).transpose(2, 0, 1, 3).reshape(groups, n * oh * ow,
                                                                                               kh * kw * cg)
            wg = wt.reshape(groups, c_out // groups, kh * kw * cg).transpose(0, 2, 1)
            acc = np.matmul(cols, wg)  # (G, M, O/G)
            return acc.transpose(1, 0, 2).reshape(n, oh, ow, c_out)
        cols = cols.reshape(n * oh * ow, kh * kw * c)
    acc = cols @ wt.reshape(c_out, -1).T
    return acc.reshape(n, oh, ow, c_out)


@register
class DepthwiseConv2D(_Conv):
    code = OperationCode.DEPTHWISE_CONV_2D
    signatures = conv_signatures(8, 5, optional_from_29=True)
    n_extra = 1
    channel_dim = 3

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        mult = int(p.extra[0])
        check(mult > 0, f"{self.name}: depth multiplier must be > 0, got {mult}")
        check(flt.shape[0] == 1, f"{self.name}: filter dimension 0 must be 1, got {flt.shape[0]}")
        check(flt.shape[3] == c * mult,
              f"{self.name}: filter depth {flt.shape[3]} != input depth {c} * depth multiplier {mult}")
        return flt.shape[3]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        fast = depthwise_fast(call, p, (n, h, w, c), (kh, kw), (oh, ow), c_out)
        if fast is not None:
            return [from_nhwc(fast, p.nchw)]
        inp = call.ins[0]
        quant = inp.type in QUANT8
        bound = None
        if quant:
            # Integer products summed exactly: in float32 while every partial sum is < 2**24.
            mx, mw = quant_magnitudes(inp, call.ins[1])
            bound = float(kh * kw) * mx * mw
            dtype = np.float32 if bound < 2.0 ** 24 else np.float64
        else:
            dtype = np.float32  # accumulated in float32, as NNAPI's CPU implementation does
        mult = c_out // c
        if quant:
            # Pad the 8-bit input with its zero point (0 once corrected), then convert once.
            x = to_nhwc(inp.value, p.nchw)
            if mult > 1:
                x = np.repeat(x, mult, axis=3)
            need_h = (oh - 1) * p.stride_h + (kh - 1) * p.dilation_h + 1
            need_w = (ow - 1) * p.stride_w + (kw - 1) * p.dilation_w + 1
            x = padded_window_input(x, p.pads[2], p.pads[0], need_h, need_w, inp.zero_point).astype(dtype)
            if inp.zero_point:
                x -= dtype(inp.zero_point)
            flt = call.ins[1]
            wt = flt.value.astype(dtype)
            if flt.type != PC and flt.zero_point:
                wt -= dtype(flt.zero_point)
            acc = depthwise_nhwc(x, wt[0], p, oh, ow, padded=True)
        else:
            x, wt = operand_values(inp, call.ins[1], dtype)
            x = to_nhwc(x, p.nchw)
            if mult > 1:
                x = np.repeat(x, mult, axis=3)
            acc = depthwise_nhwc(x, wt[0], p, oh, ow)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def depthwise_nhwc(x, wt, p: Spatial, oh, ow, padded: bool = False):
    """Depthwise accumulator: per output position and channel, the sum over kernel taps of the
    padded input times the tap's weight, as one ``einsum`` over a strided view of the windows.

    With a horizontal stride of 1 the width and channel axes of a window row are flattened into
    one long axis (tap kx is then an offset of kx * dilation * C elements), with the weights tiled
    along it: einsum's inner loop runs over OW * C elements instead of C."""
    n, h, w, c = x.shape
    kh, kw = wt.shape[0], wt.shape[1]
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    # ``padded``: x is already the padded input (window rows/cols from 0).
    xp = x[:, :need_h, :need_w, :] if padded else padded_window_input(x, top, left, need_h, need_w)
    if not xp.flags.c_contiguous:
        xp = np.ascontiguousarray(xp)
    s0, s1, s2, s3 = xp.strides
    if sw == 1:
        wins = np.lib.stride_tricks.as_strided(xp, (n, oh, kh, kw, ow * c), (s0, s1 * sh, s1 * dh, s2 * dw, s3),
                                               writeable=False)
        tiled = np.tile(wt, (1, 1, ow))  # (KH, KW, OW * C)
        acc = np.einsum("nyijk,ijk->nyk", wins, tiled)
        return acc.reshape(n, oh, ow, c)
    wins = np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3),
                                           writeable=False)
    return np.einsum("nyxijc,ijc->nyxc", wins, wt)


@register
class GroupedConv2D(_Conv):
    code = OperationCode.GROUPED_CONV_2D
    signatures = conv_signatures(8, 5, optional_from_29=False, min_level=29, always_tail=(BOOL,))
    n_extra = 1
    dilation = False
    channel_dim = 0

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        groups = int(p.extra[0])
        check(groups > 0, f"{self.name}: number of groups must be > 0, got {groups}")
        check(flt.shape[3] > 0 and flt.shape[3] * groups == c,
              f"{self.name}: filter depth {flt.shape[3]} * groups {groups} != input depth {c}")
        check(flt.shape[0] > 0 and flt.shape[0] % groups == 0,
              f"{self.name}: output depth {flt.shape[0]} is not a multiple of the number of groups {groups}")
        return flt.shape[0]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        groups = int(p.extra[0])
        dtype, bound = accumulator_type(call, kh * kw * c // groups, n * oh * ow * c_out * kh * kw * c // groups)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        acc = conv2d_nhwc(x, wt, p, kh, kw, oh, ow, groups=groups)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def _transpose_signatures():
    base = {29: [(F32, F32, F32), (F16, F16, F16), (Q8, Q8, TI32), (Q8, PC, TI32)],
            30: [(S8, S8, TI32), (S8, PC, TI32)]}
    sigs = []
    for lvl, triples in base.items():
        for (a, f, b) in triples:
            sigs.append(Signature(lvl, [a, f, b] + [I32] * 7 + [BOOL], [a]))
            sigs.append(Signature(lvl, [a, f, b, TI32] + [I32] * 4 + [BOOL], [a]))
    return sigs


@register
class TransposeConv2D(Operation):
    code = OperationCode.TRANSPOSE_CONV_2D
    signatures = _transpose_signatures()

    def geometry(self, call: Call):
        ins = call.ins
        inp, flt, bias, out = ins[0], ins[1], ins[2], call.outs[0]
        name = self.name
        _check_tensor_ranks(name, inp, flt, bias)
        p = Spatial()
        if len(ins) == 11:
            p.explicit = True
            p.pads = tuple(int(ins[k].scalar()) for k in range(3, 7))
            p.stride_w, p.stride_h = int(ins[7].scalar()), int(ins[8].scalar())
            p.fuse = int(ins[9].scalar())
            p.nchw = bool(ins[10].scalar())
        else:
            shape_arg = ins[3]
            check(shape_arg.rank == 1 and shape_arg.shape[0] == 4,
                  f"{name}: output shape tensor must be 1-D with 4 elements, got shape {shape_arg.shape}")
            p.padding_code = int(ins[4].scalar())
            check(p.padding_code in (PaddingCode.SAME, PaddingCode.VALID),
                  f"{name}: implicit padding scheme {p.padding_code} is not SAME (1) or VALID (2)")
            p.stride_w, p.stride_h = int(ins[5].scalar()), int(ins[6].scalar())
            p.fuse = int(ins[7].scalar())
            p.nchw = bool(ins[8].scalar())
        check(p.stride_w > 0 and p.stride_h > 0, f"{name}: strides must be > 0, got width {p.stride_w} "
                                                 f"height {p.stride_h}")
        check_fuse_code(p.fuse)
        n, h, w, c = nhwc_dims(inp.shape, p.nchw)
        c_out, kh, kw = flt.shape[0], flt.shape[1], flt.shape[2]
        check(h > 0 and w > 0 and c > 0, f"{name}: input height, width and depth must be > 0, got {inp.shape}")
        check(c_out > 0 and kh > 0 and kw > 0, f"{name}: filter dimensions must be > 0, got {flt.shape}")
        check(flt.shape[3] == c, f"{name}: filter depth {flt.shape[3]} != input depth {c}")
        check(bias.shape[0] == c_out, f"{name}: bias has {bias.shape[0]} elements for {c_out} output channels")
        check_quant_conv(name, inp, flt, bias, out, 0, c_out)
        if not p.explicit:
            dims = [int(v) for v in ins[3].value.reshape(-1)]
            out_h, out_w = (dims[2], dims[3]) if p.nchw else (dims[1], dims[2])
            if p.padding_code == PaddingCode.SAME:
                left, right = same_padding(out_w, p.stride_w, 1, kw, transpose=True)
                top, bottom = same_padding(out_h, p.stride_h, 1, kh, transpose=True)
                p.pads = (left, right, top, bottom)
        left, right, top, bottom = p.pads
        # Right/bottom padding may be negative in the implicit form (tight fit of the last stride).
        check(left >= 0 and top >= 0 and (not p.explicit or (right >= 0 and bottom >= 0)),
              f"{name}: paddings must be >= 0, got {list(p.pads)}")
        oh = h * p.stride_h + kh - p.stride_h - top - bottom
        ow = w * p.stride_w + kw - p.stride_w - left - right
        check(oh > 0 and ow > 0, f"{name}: output would be {oh}x{ow}")
        return p, (n, h, w, c), (kh, kw), (oh, ow), c_out

    def infer(self, call: Call):
        p, (n, _, _, _), _, (oh, ow), c_out = self.geometry(call)
        return [layout_shape(n, oh, ow, c_out, p.nchw)]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        # Each output sums at most KH*KW*C products.
        dtype, bound = accumulator_type(call, kh * kw * c, n * h * w * c_out * kh * kw * c)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        sh, sw = p.stride_h, p.stride_w
        left, _, top, _ = p.pads
        # Every input pixel times the whole filter: (N, H, W, KH, KW, O), one matmul.
        wmat = wt.transpose(3, 1, 2, 0).reshape(c, kh * kw * c_out)  # (C, KH*KW*O)
        cols = (x.reshape(n * h * w, c) @ wmat).reshape(n, h, w, kh, kw, c_out)
        full_h = max((h - 1) * sh + kh, top + oh)
        full_w = max((w - 1) * sw + kw, left + ow)
        full = np.zeros((n, full_h, full_w, c_out), cols.dtype)
        for ky in range(kh):
            for kx in range(kw):
                full[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (w - 1) * sw + 1:sw, :] += cols[:, :, :, ky, kx, :]
        acc = full[:, top:top + oh, left:left + ow, :]
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]
