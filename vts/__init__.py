"""VTS: tests that call a driver's interface (:mod:`nnapi_ref.hal`) directly, with no runtime in
between, so no validation or CPU fallback hides a driver's faults. ``pytest vts --driver=...``.

A package (as ``cts`` and ``tests`` are) so that ``vts/test_generated.py`` and ``cts/test_generated.py``
can be collected in the same session. Environment variables sizing the run:

* ``NNTS_VTS_SUBSET``: how many test models of each test-vector file also run the other execution
  paths (callback, fenced, burst, dynamic shapes, insufficient output, device memory), and the
  request-validation tests; ``1`` by default, ``all`` for every model. Every model always runs
  the synchronous path.
* ``NNTS_VTS_MUTATION_SUBSET``: how many models of each file get every model mutation of
  ``test_validate_model.py`` (``1`` by default, ``all``, or ``0`` for none).
* ``NNTS_VTS_MUTATION_MAX_OPERANDS``: models with more operands get no mutations (``100`` by
  default, ``all`` for no limit): mutations grow with the square of a model's size.

The nnts plugin reads them in ``pytest_configure`` (:meth:`Sizes.from_environment`); the tests
find them as ``config.nnts_vts``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Sizes:
    """How much of VTS runs; each a count, None for all."""
    subset: int | None = 1
    mutation_subset: int | None = 1
    mutation_max_operands: int | None = 100

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Sizes:
        """ValueError for a value that is neither a number nor ``all``."""
        return cls(_size(environ, "NNTS_VTS_SUBSET", cls.subset),
                   _size(environ, "NNTS_VTS_MUTATION_SUBSET", cls.mutation_subset),
                   _size(environ, "NNTS_VTS_MUTATION_MAX_OPERANDS", cls.mutation_max_operands))


def _size(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = environ.get(name, "").strip().lower()
    if not value:
        return default
    if value == "all":
        return None
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number or 'all'") from None
