"""Hypothesis strategies for random NNAPI models, for driver authors' own properties (the way
array-api-tests exposes its strategies)::

    from hypothesis import given
    from nnts.generators.strategies import models

    @given(models(types=["TENSOR_QUANT8_ASYMM"], max_operations=8))
    def test_my_driver_agrees(graph):
        ...  # graph.to_test(name) is a test model with input values and the reference's outputs

A drawn :class:`nnts.generators.graphs.Graph` comes from a seed and an operation count; hypothesis shrinks
both, and fewer operations give a prefix of the same graph (see :func:`nnts.generators.random_graphs.generate`).
"""
from __future__ import annotations

try:
    from hypothesis import strategies as st
except ImportError as e:  # an optional dependency: say which install brings it
    raise ImportError("nnts.generators.strategies needs hypothesis: pip install 'nnts[all]' (or hypothesis)",
                      name=e.name) from None

from nnapi_ref.types import OperandCode, OperationCode
from nnts.generators.graphs import MAX_LEVEL
from nnts.generators.random_graphs import generate


def _codes(enum, names):
    return None if names is None else [enum[n] if isinstance(n, str) else enum(n) for n in names]


def models(operations=None, types=None, level: int = MAX_LEVEL, min_operations: int = 1,
           max_operations: int = 40, max_dim: int = 6, relaxed: bool | None = None) -> st.SearchStrategy:
    """Valid random models (:class:`nnts.generators.graphs.Graph`, with input values) built from
    ``operations`` (OperationCode names or values; default every family the generator declares),
    starting from tensors of ``types`` (OperandCode names or values), with signatures up to
    feature level ``level``, of ``min_operations`` to ``max_operations`` operations."""
    operations, types = _codes(OperationCode, operations), _codes(OperandCode, types)
    return st.builds(lambda seed, n: generate(seed, n, types, operations, level, max_dim, relaxed),
                     st.integers(0, 2 ** 32 - 1), st.integers(min_operations, max_operations))
