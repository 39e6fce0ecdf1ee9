"""Requantization: the fixed-point arithmetic every quantized operation ends with, in one place.

A quantized operation computes an exact int32 accumulator ``acc`` and must output
``round(acc * M) + zero_point``, clamped, where the real multiplier ``M`` is a ratio of scales
(``input_scale * filter_scale / output_scale`` for a convolution). NNAPI's CPU implementation
(AOSP ``common/cpu_operations``, on TFLite's kernels) does this in three steps, each here once:

1. **Multiplier derivation** (:func:`scale_products`, :func:`product_multipliers`,
   :func:`prelu_multipliers`, :func:`tflite_mean_multiplier`): which scales are multiplied in
   which precision. This is where AOSP and TFLite differ most, and what the *convention*
   selects (see below).
2. **Q31 multiplier and shift** (:func:`quantize_multiplier`, :func:`quantize_multipliers`):
   ``M = multiplier * 2**(shift - 31)`` with ``multiplier`` in [2**30, 2**31) (``frexp``, the
   mantissa rounded half away from zero; a mantissa rounding up to 2**31 halves and bumps the
   shift; ``shift < -31`` flushes to 0). AOSP's ``QuantizeMultiplier`` (OperationsUtils.cpp) and
   TFLite's (quantization_util.cc) are the same function.
3. **Fixed-point multiplication** (:func:`multiply_by_quantized_multiplier`): for ``shift > 0``
   the accumulator is shifted left first (in int32, wrapping as C does), then
   ``SaturatingRoundingDoublingHighMul`` (:func:`saturating_rounding_doubling_high_mul`:
   ``round(a * b / 2**31)``, halves up, ``MIN * MIN`` saturating) and, for ``shift < 0``,
   ``RoundingDivideByPOT`` (:func:`rounding_divide_by_pot`: halves away from zero). That is two
   roundings: gemmlowp's, which both AOSP and TFLite's reference kernels use (TFLite's
   single-rounding variant, ``TFLITE_SINGLE_ROUNDING``, is a build option neither uses). The
   caller adds the zero point and saturates to the output type (and the fused activation's range,
   :func:`nnapi_ref.ops.common.activation_range_quant`).

Conventions
-----------
``"nnapi"`` (the default) is AOSP's CPU implementation. It derives every product multiplier the
same way (FLOAT32_PRODUCT): its ``GetQuantizedConvolutionMultipler`` (common/OperationsUtils.cpp),
MUL (Broadcast.cpp) and PRELU (PRelu.cpp) multiply two ``float`` scales, so the product is
rounded to float32, then widen it and divide by the output scale in double; per-channel filters
go through the same function with each channel's scale.

``"tflite"`` is TensorFlow Lite's reference kernels (``OpResolverType.BUILTIN_REF`` of
ai-edge-litert 2.3.0, the kernels ``python -m nnts.mlts.diverge`` compares with), which differ from
AOSP's kernel by kernel; each difference was measured against those kernels at inputs where the
candidate derivations part ways (tests/test_diverge.py):

* the multiplier's form (:func:`scale_products`): DOUBLE for int8 convolutions and any
  per-channel filter (PopulateConvolutionQuantizationParams); FLOAT32_PRODUCT, as AOSP, for
  uint8 convolutions with one filter scale and BATCH_MATMUL (GetQuantizedConvolutionMultipler);
  FLOAT32 for MUL and PRELU's negative side (one float expression); PRELU's positive side is the
  float32 quotient in both conventions (:func:`prelu_multipliers`).
* FULLY_CONNECTED requantizes in double floating point, rounded once
  (:func:`tflite_float_requantize`).
* MEAN rounds where AOSP truncates, and may change the quantization
  (:func:`tflite_mean_multiplier`, :func:`nnapi_ref.ops.reductions.tflite_quantized_mean`).
* Comparisons rescale in fixed point to 1/256; MAXIMUM, MINIMUM and SELECT use the stored values
  whatever the quantizations; int8 RESIZE_BILINEAR interpolates in 1/1024ths, rounding halves away from zero.

The rest, steps 2 and 3 included (except FULLY_CONNECTED's), is the same in both (each operation's module docstring
says so under "AOSP and TFLite"). The float32 and double forms differ in the last bits of
float32's 24-bit mantissa, which moves the Q31 multiplier by up to ~2**7 units and flips an
output by one step where ``acc * M`` lies within ~1e-7 relative of a rounding point
(MobileNets: a few elements per million). The convention is chosen per compilation and
execution (:func:`using`, set by the reference driver from its ``convention`` option).
"""
from __future__ import annotations

import contextvars
import math

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

CONVENTIONS = ("nnapi", "tflite")
_CONVENTION = contextvars.ContextVar("nnapi_ref_requantization_convention", default="nnapi")


def using(convention: str) -> "_Using":
    """Run the enclosed operations with the ``convention`` ("nnapi" or "tflite")."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown requantization convention {convention!r}; expected one of {CONVENTIONS}")
    return _Using(convention)


class _Using:
    """``using``'s context manager (a class: a generator-based one costs microseconds, and every
    prepare and execution of the reference driver enters one)."""

    __slots__ = ("convention", "token")

    def __init__(self, convention: str):
        self.convention = convention

    def __enter__(self) -> None:
        self.token = _CONVENTION.set(self.convention)

    def __exit__(self, *exc) -> None:
        _CONVENTION.reset(self.token)


def convention() -> str:
    """The convention of the operations running now."""
    return _CONVENTION.get()


# ---- 1. multiplier derivation ------------------------------------------------------------------

# How a product of two scales over a third becomes the real multiplier (the only choice here):
DOUBLE = "double"                    # double(a) * double(b) / double(out)
FLOAT32_PRODUCT = "float32 product"  # double(float32(a * b)) / double(out): AOSP, always
FLOAT32 = "float32"                  # float32(float32(a * b) / out), widened


def scale_products(a_scale: float, b_scales, out_scale: float, tflite: str = DOUBLE) -> np.ndarray:
    """``a_scale * b_scales / out_scale`` (b per channel, or one) as float64, formed as the
    convention does: AOSP ("nnapi") always as FLOAT32_PRODUCT (its GetQuantizedConvolutionMultipler,
    MUL and PRELU multiply two ``float`` scales, then divide in double), TFLite ("tflite") as
    ``tflite`` says, which depends on the kernel (see the module docstring)."""
    a, b, out = np.float32(a_scale), np.asarray(b_scales, np.float32), np.float32(out_scale)
    form = tflite if convention() == "tflite" else FLOAT32_PRODUCT
    if form == DOUBLE:
        return float(a) * b.astype(np.float64) / float(out)
    if form == FLOAT32:
        return ((a * b) / out).astype(np.float64)
    return (a * b).astype(np.float64) / float(out)


def product_multipliers(a_scale: float, b_scales, out_scale: float,
                        tflite: str = DOUBLE) -> tuple[np.ndarray, np.ndarray]:
    """(multiplier, shift) arrays for ``a_scale * b_scales / out_scale`` (:func:`scale_products`):
    the convolutions' (input and filter scales, per output channel), BATCH_MATMUL's, MUL's and
    PRELU's requantization (FULLY_CONNECTED's under the NNAPI convention)."""
    return quantize_multipliers(scale_products(a_scale, b_scales, out_scale, tflite))


def prelu_multipliers(in_scale: float, alpha_scale: float, out_scale: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """PRELU's (multiplier, shift) pairs for positive inputs, ``in_scale / out_scale``, and
    negative ones, ``in_scale * alpha_scale / out_scale``. AOSP's PRelu.cpp and TFLite's PRELU
    Prepare (activations.cc) both divide two floats for the first, so the quotient is rounded to
    float32; the second is AOSP's FLOAT32_PRODUCT (the product is a ``double`` variable) and
    TFLite's FLOAT32 (one float expression)."""
    positive = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
    m, s = product_multipliers(in_scale, [alpha_scale], out_scale, tflite=FLOAT32)
    return positive, (int(m[0]), int(s[0]))


def tflite_float_requantize(acc, in_scale: float, filter_scales, out_scale: float) -> np.ndarray:
    """TFLite's reference FULLY_CONNECTED (reference_integer_ops::FullyConnected and
    FullyConnectedPerChannel given the float scales): no fixed point, but
    ``std::round(double(acc) * (double(in_scale) * double(filter_scale) / double(out_scale)))``,
    one rounding, halves away from zero. ``filter_scales`` broadcast along the last axis."""
    scale = float(np.float32(in_scale)) * np.asarray(filter_scales, np.float32).astype(np.float64)
    value = np.asarray(acc, np.float64) * (scale / float(np.float32(out_scale)))
    whole = np.trunc(value)
    return whole + np.where(np.abs(value - whole) >= 0.5, np.sign(value), 0.0)  # exact std::round


def tflite_mean_multiplier(in_scale: float, out_scale: float, count: int) -> tuple[int, int]:
    """(multiplier, shift) of TFLite's quantized MEAN (reference_ops::QuantizedMeanOrSum, the
    kernel of the "tflite" convention): ``in_scale / out_scale`` in double through
    :func:`quantize_multiplier`, then ``1 / count`` folded in: the Q31 multiplier shifted left by
    ``floor(log2(count))`` (at most 32, and at most ``31 + shift`` so the right shift stays
    within 31), divided by ``count`` with integer truncation, and the shift lowered to match.
    The truncation is why this is not the Q31 multiplier of ``in_scale / (out_scale * count)``."""
    multiplier, shift = quantize_multiplier(float(np.float32(in_scale)) / float(np.float32(out_scale)))
    fold = min(count.bit_length() - 1, 32, 31 + shift)
    return (multiplier << fold) // count, shift - fold


# ---- 2. Q31 multiplier and shift ---------------------------------------------------------------

def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: ``real ~= multiplier * 2**(shift - 31)``, multiplier in
    [2**30, 2**31). Returns (multiplier, shift); shift > 0 is a left shift."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(math.copysign(math.floor(abs(q) * (1 << 31) + 0.5), q))  # std::round: halves away from 0
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multipliers(real) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_multiplier` over an array of reals: (multiplier, shift) int64 arrays (at
    least 1-D)."""
    real = np.atleast_1d(np.asarray(real, np.float64))
    q, e = np.frexp(real)
    q_fixed = np.sign(q) * np.floor(np.abs(q) * float(1 << 31) + 0.5)  # exact in float64
    over = q_fixed == float(1 << 31)
    q_fixed = np.where(over, q_fixed / 2, q_fixed)
    e = np.where(over, e + 1, e)
    tiny = e < -31
    return np.where(tiny, 0, q_fixed).astype(np.int64), np.where(tiny, 0, e).astype(np.int64)


# ---- 3. fixed-point multiplication ---------------------------------------------------------------

def wrap_int32(x) -> np.ndarray:
    """Wrap int64 values as the C implementation's int32 arithmetic would."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def saturating_rounding_doubling_high_mul(a, b, bits: int = 32) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul (ARM VQRDMULH) on int64 arrays holding
    ``bits``-bit values (int32 by default, int16 for 16-bit fixed point); ``a`` and ``b``
    broadcast. round(a * b / 2**(bits-1)) with halves rounded up, and MIN * MIN saturating to MAX.

    gemmlowp adds a nudge of 2**(bits-2) (or 1 - 2**(bits-2) when a*b < 0) and divides with C's
    truncation toward zero; for every sign that equals floor((a*b + 2**(bits-2)) / 2**(bits-1)),
    an arithmetic right shift."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    high = np.asarray(a * b)  # a fresh array; |a*b| <= 2**62: no int64 overflow
    high += np.int64(1 << (bits - 2))
    high >>= bits - 1
    lo = -(1 << (bits - 1))
    if np.any(b == lo):
        high = np.where((a == lo) & (b == lo), np.int64(-lo - 1), high)
    return high


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent rounded to nearest, halves away from zero;
    ``exponent`` (0..62) may be an array broadcasting with ``x`` (per channel, say).

    gemmlowp adds 1 when the remainder exceeds half the divisor (half plus one for negative x);
    that is floor((x + 2**(exponent-1) - [x < 0]) / 2**exponent) for exponent > 0."""
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    if exponent.ndim == 0:
        e = int(exponent)
        if e == 0:
            return x
        r = np.asarray(x >> 63)  # -1 where x < 0
        r += x
        r += np.int64(1 << (e - 1))
        r >>= e
        return r
    half = (np.int64(1) << exponent) >> 1  # 0 where exponent == 0
    r = np.where(exponent > 0, x >> 63, np.int64(0)) + x
    r += half
    r >>= exponent
    return r


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier: round(x * multiplier * 2**(shift-31)) in int32 fixed point,
    i.e. RoundingDivideByPOT(SRDHM(x << max(shift, 0), multiplier), max(-shift, 0)), the left
    shift wrapping around in int32 as the C code does. ``x`` holds int32 values; ``multiplier``
    and ``shift`` may be arrays broadcasting with it (per channel, say)."""
    x = np.asarray(x, np.int64)
    multiplier = np.asarray(multiplier, np.int64)
    shift = np.asarray(shift, np.int64)
    if shift.ndim == 0:
        s = int(shift)
        if s > 0:
            x = wrap_int32(x << s)
        return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), max(-s, 0))
    if np.any(shift > 0):
        x = wrap_int32(x << np.maximum(shift, 0))
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), np.maximum(-shift, 0))
