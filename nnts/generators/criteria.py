"""AOSP's accuracy criteria for random cases (``TestRandomGraph.cpp``'s ``kSmallGraphCriteria`` and
``kLargeGraphCriteria``, checked as its ``TestHarness.cpp`` ``expectNear`` does): every element
within ``atol + rtol * |expected|``; over the compared elements of an output of at least 10 of
them, the mean difference (bias) and mean squared difference (MSE) within limits, differences of
floats divided by max(1, |expected|). The single-operation tiers (:mod:`nnts.generators.single`)
are criteria of the same kind."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nnapi_ref.types import OperandCode as T
from nnts.generators.graphs import BOOL8, F16, F32, I32, QUANT8, Graph

SMALL_GRAPH_OPERATIONS = 5  # AOSP's GraphSize::SMALL
MIN_ELEMENTS_FOR_BIAS_MSE = 10
BOOL8_MISMATCH_RATIO = 0.1
SKIP_ABOVE = {F32: 1e3, F16: 1e2}


@dataclass(frozen=True)
class Criterion:
    atol: float
    rtol: float = 0.0
    bias: float = math.inf
    mse: float = math.inf


# Quantized types share their figures (AOSP: quant8 asymm, asymm signed, symm, quant16 asymm, symm).
QUANTIZED = QUANT8 + (T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM)
SMALL_GRAPH = {F32: Criterion(1e-2, 1e-2, 4e-4, 1e-5), F16: Criterion(1.0, 1.0, 5e-2, 1e-2),
               I32: Criterion(1), **{t: Criterion(12, 0, 2, 2) for t in QUANTIZED}}
LARGE_GRAPH = {F32: Criterion(1e-1, 1e-1, 1e-2, 1e-4), F16: Criterion(1.0, 1.0, 1e-1, 5e-2),
               I32: Criterion(1), **{t: Criterion(12, 0, 2, 2) for t in QUANTIZED}}


def criteria_for(graph: Graph) -> dict:
    table = SMALL_GRAPH if len(graph.operations) <= SMALL_GRAPH_OPERATIONS else LARGE_GRAPH
    return {**table, F32: table[F16]} if graph.relaxed else table


def compare_output(expected: np.ndarray, actual: np.ndarray, type_: T, criterion: Criterion | None,
                   what: str) -> str | None:
    """Why ``actual`` fails the criterion, or None when it passes."""
    if expected.shape != actual.shape:
        return f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}"
    if type_ == BOOL8:
        wrong = int(np.count_nonzero(expected != actual))
        allowed = math.ceil(BOOL8_MISMATCH_RATIO * expected.size)
        return None if wrong <= allowed else f"{what}: {wrong} of {expected.size} booleans differ (at most {allowed})"
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    compared = np.isfinite(e)
    if type_ in SKIP_ABOVE:
        compared &= np.abs(e) <= SKIP_ABOVE[type_]
    tolerance = criterion.atol + criterion.rtol * np.abs(e)
    with np.errstate(invalid="ignore"):
        diff = np.where(compared, a - e, 0.0)
        excess = np.where(compared, np.where(np.isfinite(diff), np.abs(diff) - tolerance, np.inf), -np.inf)
    if np.any(excess > 0):
        worst = np.unravel_index(int(np.argmax(excess)), e.shape)
        return (f"{what}: atol/rtol: {int(np.count_nonzero(excess > 0))} of {e.size} elements beyond {criterion.atol:g} + "
                f"{criterion.rtol:g}*|expected|; worst at {list(map(int, worst))}: expected {e[worst]:.6g}, "
                f"got {a[worst]:.6g}")
    n = int(np.count_nonzero(compared))
    if n < MIN_ELEMENTS_FOR_BIAS_MSE:
        return None
    if type_ in SKIP_ABOVE:
        diff = diff / np.maximum(1.0, np.abs(np.where(compared, e, 0.0)))
    bias, mse = float(np.sum(diff) / n), float(np.sum(diff * diff) / n)
    unit = " steps" if type_ in QUANTIZED else " (relative)" if type_ in SKIP_ABOVE else ""
    squared = " steps²" if type_ in QUANTIZED else " (relative)" if type_ in SKIP_ABOVE else ""
    if abs(bias) > criterion.bias:
        return f"{what}: bias: mean error {bias:.4g}{unit} beyond {criterion.bias:g} over {n} elements"
    if mse > criterion.mse:
        return f"{what}: mse: mean squared error {mse:.4g}{squared} beyond {criterion.mse:g} over {n} elements"
    return None


def criteria_json(table: dict) -> dict:
    """A criteria table as a test-vector file records it (``accuracy_criteria``, read by
    ``nnts vectors run``: the replay judges as the random test did)."""
    return {T(t).name: {"atol": c.atol, "rtol": c.rtol, **({"bias": c.bias} if math.isfinite(c.bias) else {}),
                        **({"mse": c.mse} if math.isfinite(c.mse) else {})} for t, c in table.items()}
