"""NNAPI's accuracy criteria (as CTS and VTS apply them), reporting the worst element.

* TENSOR_FLOAT32: |actual - expected| <= 1e-5 + 5 * 2**-23 * |expected|; the float16 rule when
  the model is relaxed or has any float16 operand.
* TENSOR_FLOAT16: |actual - expected| <= 5 * 2**-10 * (1 + |expected|).
* INT32 and quant16 types: +-1. Quant8 types: +-1 (+-3 for mobilenet models). BOOL8: exact.
* RANDOM_MULTINOMIAL: class frequencies within a tolerance of softmax(logits).
NaN must match NaN, and infinities must match exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnapi_ref.types import OperandCode as T

FLOAT32_ATOL, FLOAT32_RTOL = 1e-5, 5.0 * 2.0 ** -23
FLOAT16_ATOL = FLOAT16_RTOL = 5.0 * 2.0 ** -10
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)


@dataclass
class Comparison:
    """Outcome of comparing one output. ``excess`` is how far the worst element is beyond its
    tolerance (<= 0 when everything is within)."""

    ok: bool
    message: str = ""
    worst_index: tuple | None = None
    expected: float | None = None
    actual: float | None = None
    tolerance: float = 0.0
    excess: float = 0.0


def criteria(code: T, float16_rules: bool = False, mobilenet: bool = False) -> tuple[float, float]:
    """(absolute, relative) tolerance for an operand type."""
    if code in (T.TENSOR_FLOAT32, T.FLOAT32):
        return (FLOAT16_ATOL, FLOAT16_RTOL) if float16_rules else (FLOAT32_ATOL, FLOAT32_RTOL)
    if code in (T.TENSOR_FLOAT16, T.FLOAT16):
        return FLOAT16_ATOL, FLOAT16_RTOL
    if code in QUANT8:
        return (3.0 if mobilenet else 1.0), 0.0
    if code in (T.TENSOR_BOOL8, T.BOOL):
        return 0.0, 0.0
    return 1.0, 0.0


def compare(expected: np.ndarray, actual: np.ndarray, code: T, float16_rules: bool = False,
            mobilenet: bool = False, what: str = "output") -> Comparison:
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if expected.shape != actual.shape:
        return Comparison(False, f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}")
    if expected.size == 0:
        return Comparison(True)
    atol, rtol = criteria(code, float16_rules, mobilenet)
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    finite = np.isfinite(e) & np.isfinite(a)
    tol = atol + rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(a - e), 0.0)
    # A non-finite value on either side must be matched exactly (NaN by NaN).
    same = (np.isnan(e) & np.isnan(a)) | (a == e)
    diff = np.where(~finite & ~same, np.inf, diff)
    excess = diff - tol
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    worst_excess = float(excess[worst])
    result = Comparison(worst_excess <= 0, worst_index=tuple(int(i) for i in worst), expected=float(e[worst]),
                        actual=float(a[worst]), tolerance=float(tol[worst]), excess=worst_excess)
    if not result.ok:
        n_bad = int(np.count_nonzero(excess > 0))
        result.message = (f"{what}: {n_bad} of {e.size} elements outside tolerance; worst at {list(result.worst_index)}: "
                          f"expected {result.expected:.9g}, got {result.actual:.9g}, |diff| {float(diff[worst]):.3g} > "
                          f"tolerance {result.tolerance:.3g}")
    return result


def compare_multinomial(logits: np.ndarray, samples: np.ndarray, tolerance: float, what: str = "output") -> Comparison:
    """RANDOM_MULTINOMIAL: each batch's class frequencies within ``tolerance`` of softmax(logits)."""
    logits = np.asarray(logits, np.float64)
    samples = np.asarray(samples)
    if logits.ndim != 2 or samples.ndim != 2 or samples.shape[0] != logits.shape[0]:
        return Comparison(False, f"{what}: samples of shape {list(samples.shape)} for logits {list(logits.shape)}")
    classes = logits.shape[1]
    if samples.size and (samples.min() < 0 or samples.max() >= classes):
        return Comparison(False, f"{what}: sampled class outside [0, {classes})")
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    freq = np.stack([np.bincount(row, minlength=classes) for row in samples.astype(np.int64)]) / max(samples.shape[1], 1)
    excess = np.abs(freq - p) - tolerance
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    ok = float(excess[worst]) <= 0
    message = "" if ok else (f"{what}: class {worst[1]} of batch {worst[0]} sampled with frequency "
                             f"{freq[worst]:.4f}, softmax gives {p[worst]:.4f} (tolerance {tolerance})")
    return Comparison(ok, message, tuple(int(i) for i in worst), float(p[worst]), float(freq[worst]), tolerance,
                      float(excess[worst]))
