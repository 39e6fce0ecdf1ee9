"""Single-operation random tests (AOSP's ``SingleOperationTest`` in ``TestRandomGraph.cpp``): one
operation of random form, types and sizes per case, compared against the reference with the
accuracy tier AOSP assigns that operation, far tighter than the graph criteria.

Tiers (every element within atol + rtol * |expected|; bias and MSE over outputs of at least 10
compared elements, float differences divided by max(1, |expected|), as in :mod:`nnts.runners.differential`):

========  ===================================  ===================================  ==================
tier      TENSOR_FLOAT32 atol/rtol, bias, MSE  TENSOR_FLOAT16 atol/rtol, bias, MSE  quant8 atol, bias, MSE
========  ===================================  ===================================  ==================
strict    1e-6, 1e-7, 1e-10                    1e-3, 1e-4, 1e-8                     1, 0.1, 0.1
medium    1e-5, 1e-6, 1e-8                     1e-2, 1e-3, 1e-5                     2, 1.2, 1.2
relaxed   1e-3, 3e-5, 1e-6                     1, 5e-3, 1e-3                        10, 1.5, 1.5
conv      2e-2, 4e-4, 1e-5                     1, 5e-2, 1e-2                        10, 1.5, 1.5
========  ===================================  ===================================  ==================

TENSOR_INT32 within 1 in every tier; TENSOR_BOOL8 at most ceil(10%) of the elements differing.
Float32 outputs of a relaxed model are judged by the tier's float16 figures, with an MSE of at most
1e-6 for strict and medium operations (float16 precision; AOSP's random graphs are never relaxed,
and the strict float16 MSE, 1e-8, is for exact copies of float16 values) and a bias of at least
1.5e-3 (float16 roundings all one way, as in FILL's one value).

Strict: operations that move data or compare (RESHAPE, GATHER, EQUAL, ARGMAX, TOPK_V2...);
medium: one simple computation per element (ADD, FLOOR, QUANTIZE...); relaxed: complex or
accumulating computations (LOGISTIC, L2_NORMALIZATION, REDUCE_*, pools, FULLY_CONNECTED...); conv:
the convolutions. DIV is relaxed up to feature level 29 and medium from 30, as AOSP tests it per
HAL version. Each operation's declaration names its tier (``accuracy``, :mod:`nnapi_ref.ops.base`),
as AOSP's TEST_SINGLE_OPERATION lines assign them; operations AOSP does not test singly by the same rules:
PACK, MIRROR_PAD, REVERSE and HASHTABLE_LOOKUP move data (strict); the recurrent operations, IF
and WHILE accumulate (relaxed); so do the box operations, AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and DETECTION_POSTPROCESSING (relaxed, as AOSP assigns
ROI_ALIGN and HEATMAP_MAX_KEYPOINT: exp, IoU and soft-NMS rescoring in float32).

Sizes: one case in ``WIDE_EVERY`` starts from a tensor of dimensions up to 1000 within
``nnts.generators.graphs.WIDE_ELEMENTS`` elements (AOSP's wide range; a wide draw that no form of the
operation accepts falls back to the small range), the others from dimensions up to 6.
"""
from __future__ import annotations

from nnapi_ref import ops
from nnapi_ref.types import OperationCode as Op
from nnts.generators.criteria import QUANTIZED, Criterion
from nnts.generators.families import FAMILIES, SINGLE_FAMILIES
from nnts.generators.graphs import F16, F32, I32
from nnts.generators.random_graphs import generate

STRICT = {F32: Criterion(1e-6, 1e-6, 1e-7, 1e-10), F16: Criterion(1e-3, 1e-3, 1e-4, 1e-8), I32: Criterion(1),
          **{t: Criterion(1, 0, 0.1, 0.1) for t in QUANTIZED}}
MEDIUM = {F32: Criterion(1e-5, 1e-5, 1e-6, 1e-8), F16: Criterion(1e-2, 1e-2, 1e-3, 1e-5), I32: Criterion(1),
          **{t: Criterion(2, 0, 1.2, 1.2) for t in QUANTIZED}}
RELAXED = {F32: Criterion(1e-3, 1e-3, 3e-5, 1e-6), F16: Criterion(1.0, 1.0, 5e-3, 1e-3), I32: Criterion(1),
           **{t: Criterion(10, 0, 1.5, 1.5) for t in QUANTIZED}}
CONV = {F32: Criterion(2e-2, 2e-2, 4e-4, 1e-5), F16: Criterion(1.0, 1.0, 5e-2, 1e-2), I32: Criterion(1),
        **{t: Criterion(10, 0, 1.5, 1.5) for t in QUANTIZED}}
TIERS = {"strict": STRICT, "medium": MEDIUM, "relaxed": RELAXED, "conv": CONV}  # by the name a declaration gives
WIDE_EVERY = 4  # one case in WIDE_EVERY draws wide dimensions


def operations(support=None) -> list[Op]:
    """The random-graph generator's operations and those drawn only singly (SINGLE_FAMILIES);
    given a partial driver's ``support`` (:class:`nnts.runners.support.Support`), those it supports."""
    codes = sorted(FAMILIES.keys() | SINGLE_FAMILIES.keys())
    if support is None or support.complete:
        return codes
    supported = set(support.operations())
    return [c for c in codes if c in supported] or codes


def tier(code: Op, level: int) -> dict:
    """The criteria table of ``code`` at feature ``level``."""
    return TIERS[ops.get(code).accuracy_at(level)]


# Relaxed float32 is computed with at least float16's precision: a value rounded to float16 two or
# three times (inputs, result) differs by at most about 2**-11 of itself, an MSE below 3e-7;
# bfloat16's 8 bits give about 5e-6. Strict and medium operations (one computation per element)
# are held to this on relaxed models; the others accumulate, and keep their float16 figures.
RELAXED_FLOAT32_MSE = 1e-6
# The bias of those roundings when they all go one way (FILL: every element one value): three
# roundings of 2**-11, above the strict tier's float16 bias (1e-4, for exact float16 copies).
RELAXED_FLOAT32_BIAS = 1.5e-3


def criteria_for(code: Op, graph) -> dict:
    """The tier of ``code``; float32 outputs of a relaxed model by the tier's float16 figures,
    the MSE of strict and medium operations set to RELAXED_FLOAT32_MSE, the bias at least
    RELAXED_FLOAT32_BIAS."""
    table = tier(code, graph.min_level())
    if not graph.relaxed:
        return table
    f16 = table[F16]
    mse = RELAXED_FLOAT32_MSE if table is STRICT or table is MEDIUM else f16.mse
    return {**table, F32: Criterion(f16.atol, f16.rtol, max(f16.bias, RELAXED_FLOAT32_BIAS), mse)}


def case_operation(seed: int, support=None) -> Op:
    """Case ``seed`` tests operation ``seed`` modulo the number of operations (so N cases give
    each operation N / count of them), of the operations ``support`` allows."""
    ops = operations(support)
    return ops[seed % len(ops)]


def is_wide(seed: int, support=None) -> bool:
    return (seed // len(operations(support))) % WIDE_EVERY == WIDE_EVERY - 1


ATTEMPTS = 8  # random starts per case before it is skipped (an operation with a narrow domain: LOG, SPACE_TO_DEPTH
# find no start in one attempt about one time in five; 8 attempts leave about 1 in 400,000 skipped)


def generate_case(seed: int, level: int, support=None):
    """The one-operation graph of case ``seed``: from seed ``seed``, else (no operation fitted
    the tensors drawn) from seeds ``seed + k * 10**9``, in the small range after a wide draw.
    Empty when none fits (no form at the level). ``support``: a partial driver's, whose types
    and signatures the case keeps to."""
    code = case_operation(seed, support)
    options = {"operations": [code]} if support is None else {"operations": [code], **support.options(code)}
    for attempt in range(ATTEMPTS):
        graph = generate(seed + attempt * 10**9, 1, level=level, wide=is_wide(seed, support) and attempt == 0,
                         **options)
        if graph.operations:
            break
    return graph
