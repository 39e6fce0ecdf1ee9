"""The convolutions' arithmetic, shared with FULLY_CONNECTED: the quantized requantization (the
multipliers, NNAPI's fixed point, the exact table or affine shortcuts), the fused activation, and
the accumulator type a convolution computes in (see :mod:`.convolution` for why it is exact)."""
from __future__ import annotations

import functools

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Call, T, check
from nnapi_ref.ops.common import FLOAT_ACTIVATION_RANGE, activation_range_quant
from nnapi_ref.ops.requantization import multiply_by_quantized_multiplier, product_multipliers, wrap_int32
from nnapi_ref.types import DTYPES, FuseCode

PC = T.TENSOR_QUANT8_SYMM_PER_CHANNEL
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

# Below this many multiply-adds a float convolution is accumulated in float64. (At 2**22 it
# took a float64 path through a third of MobileNet v2's layers, ~10% of the inference.)
SMALL_FLOAT_WORK = 1 << 16


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
def requant_table(mult_bytes: bytes, shift_bytes: bytes, zero_point: int, lo: int, hi: int, dtype: str):
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
def requant_affine(mult_bytes: bytes, shift_bytes: bytes, zero_point: int, lo: int, hi: int, dtype: str,
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
    """The float values of the affine requantization (see :func:`requant_affine`) of exact
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
    """``out`` (uint8) = the affine requantization ``params`` (from :func:`requant_affine`) of
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
        affine = requant_affine(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
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
        lut = requant_table(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
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


