"""The random-graph generator: every family of operations registered (:mod:`nnts.generators.families`
and the families of boxes, control flow, detection and recurrent networks), and the size of the
graph of each seed."""
from __future__ import annotations

# Each module registers its families on import (``families.declare``): imported here, they are drawn.
from nnts.generators import boxes, control_flow, detection, recurrent  # noqa: F401
from nnts.generators.families import FAMILIES, SINGLE_FAMILIES
from nnts.generators.graphs import MAX_LEVEL, Graph, generate_from


def generate(seed: int, num_operations: int = 10, types=None, operations=None, level: int = MAX_LEVEL,
             max_dim: int = 6, relaxed: bool | None = None, wide: bool = False, allows=None, then=None) -> Graph:
    """A random connected model of up to ``num_operations`` operations drawn from every family
    (:func:`nnts.generators.graphs.generate_from`), deterministic in its arguments."""
    return generate_from(FAMILIES, SINGLE_FAMILIES, seed, num_operations, types, operations, level, max_dim,
                         relaxed, wide, allows, then)


def case_size(seed: int) -> int:
    """Operations in case ``seed``: small graphs (1-5) for even seeds, large ones (6-40) for odd
    seeds, as AOSP runs 5- and 40-operation graphs."""
    return 1 + seed % 5 if seed % 2 == 0 else 6 + seed % 35
