"""Rounding chains: random graphs built to show a quantized operation's rounding. Each case is one
quantized operation, drawn as a single-operation case is (:mod:`nnts.generators.single`: random
form, sizes up to ``MAX_DIM``), followed by a SUB of a near copy of its result: a constant holding
the result plus ``NEAR_STEPS`` steps of noise at most, at its quantization. The difference spans
about a sixth of the result's range, so its fitted scale is about ``AMPLIFICATION`` times finer
and a difference of one step in the operation's result is about six steps in the chain's output.

The chain is judged by AOSP's criteria for random graphs (:mod:`nnts.generators.criteria`, quant8:
12 steps, bias 2, MSE 2). A result that rounds the wrong way half of the time (truncating where
NNAPI rounds to nearest) is a bias of half a step and an MSE of half a step squared: within the
operation's own tier (bias 1.2 to 1.5 steps), about 3 steps of bias and 18 of MSE through the
chain. One-step differences on a few elements (ties rounded another way: under 5%) stay within it.

Where the driver does not support SUB on the type, the chain ends in an ADD of the near copy's
negation (the mirrored zero point); where it supports neither, the case has no chain and is
skipped. Case ``seed`` tests the ``seed``-th (operation, quantized type) pair of what the driver
supports (:func:`case_pair`): every operation on its first quantized type, then on its second.
The amplifier's noise comes from a random stream of its own, so the operation is the one the
same seed draws without it.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref import ops
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators import single
from nnts.generators.graphs import QUANT8, Builder, Graph, Out, Reject
from nnts.generators.random_graphs import generate

NEAR_STEPS = 18  # the near copy's noise, in steps of the result's quantization
AMPLIFICATION = 6  # about 255 / (2 * (NEAR_STEPS + 1) * 1.15): the difference's fitted scale is this much finer
MAX_DIM = 8  # tensors of more elements than single cases (6)
MIN_ELEMENTS = 40  # in the operation's result: a draw of fewer is drawn again (bias and MSE need 10, and a
# rounding that goes wrong for some values only shows on many)
AMPLIFIER_STREAM = 0xA4  # the random stream (beside the seed) of the near copy's noise


def case_pairs(support) -> list[tuple[Op, T]]:
    """The (operation, quantized type) pairs of the chains: the single-operation cases' operations
    ``support`` allows, each on the quantized types it starts from there, first types first."""
    pairs = []
    for code in single.operations(support):
        types = [t for t in (support.types(code) if support is not None else QUANT8) if t in QUANT8
                 and _quantized_result(code, t)]
        pairs += [(rank, code, t) for rank, t in enumerate(types)]
    return [(code, t) for _, code, t in sorted(pairs, key=lambda p: (p[0], p[1]))]


def _quantized_result(code: Op, type_: T) -> bool:
    """Whether some signature of ``code`` with a ``type_`` input gives a quantized result."""
    return any(type_ in sig.inputs and any(o in QUANT8 for o in sig.outputs) for sig in ops.get(code).signatures)


def case_pair(seed: int, support) -> tuple[Op, T] | None:
    pairs = case_pairs(support)
    return pairs[seed % len(pairs)] if pairs else None


def amplifier(seed: int):
    """The step :func:`nnts.generators.graphs.generate_from` ends with: a SUB of a near copy of the
    last operation's quantized result (else an ADD of its negation), when the builder's driver
    supports one."""

    def amplify(b: Builder) -> None:
        if not b.operations:
            return
        x = next((t for t in reversed(b.tensors) if t.type in QUANT8 and t.index in b.operations[-1].outputs), None)
        if x is None:
            return
        rng = np.random.default_rng([seed, AMPLIFIER_STREAM])
        qmin, qmax = QUANT_RANGE[x.type]
        near = np.clip(x.value.astype(np.int64) + rng.integers(-NEAR_STEPS, NEAR_STEPS + 1, x.shape), qmin, qmax)
        mirror = qmin + qmax  # q -> mirror - q with zero point mirror - z negates the real value
        for code, copy, zero_point in ((Op.SUB, near, x.zero_point), (Op.ADD, mirror - near, mirror - x.zero_point)):
            mark = b.checkpoint()
            try:
                b.add(code, [x, b.constant(x.type, copy, x.scale, zero_point), b.scalar(T.INT32, 0)], [Out(x.type)])
                return
            except Reject:
                b.rollback(mark)

    return amplify


def generate_case(seed: int, level: int, support=None, pair: tuple[Op, T] | None = None) -> tuple[Graph, Op | None]:
    """Chain ``seed`` and the operation it tests (``pair``: its :func:`case_pair`, where known):
    two operations, or fewer where no form of the operation on the type, or no amplifier, fits
    in ``single.ATTEMPTS`` draws of at least ``MIN_ELEMENTS`` elements."""
    pair = pair or case_pair(seed, support)
    if pair is None:
        return Graph([], [], [], [], {}), None
    code, type_ = pair
    allows = None if support is None or support.complete else support.allows
    for attempt in range(single.ATTEMPTS):
        draw = seed + attempt * 10**9
        graph = generate(draw, 1, types=[type_], operations=[code], level=level, max_dim=MAX_DIM, allows=allows,
                         then=amplifier(draw))
        if len(graph.operations) == 2 and graph.values[graph.operations[0].outputs[0]].size >= MIN_ELEMENTS:
            break
    return graph, code
