"""The memory budget: the most bytes that one thing a model, a test-vector file or a model file
*declares* may make nnts allocate (an operation's outputs, an execution's buffers, a file read
whole). A declaration beyond it is an OUT_OF_MEMORY NnapiError naming what and how much, raised
before anything is allocated, never a MemoryError, swap or the kernel's OOM killer.

NNAPI bounds every operand at 4 GiB (its sizes are uint32_t; the model builder refuses more with
BAD_DATA, :func:`nnapi_ref.validation.operand_type_problem`); this bound is below it, and set for
the process, as NNAPI's properties are: an entry point sets it from ``NNTS_MEMORY_BUDGET``; the
Python API calls :func:`set_limit`.
"""
from __future__ import annotations

import re

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import ResultCode

DEFAULT_BYTES = 2 * 1024 ** 3
_limit = DEFAULT_BYTES


def limit() -> int:
    return _limit


def set_limit(nbytes: int) -> None:
    """The process's budget in bytes (positive)."""
    global _limit
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError(f"the memory budget must be a positive number of bytes, not {nbytes!r}")
    _limit = nbytes


_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse(text: str) -> int:
    """Bytes from ``2G``, ``512M``, ``64K`` or a plain count (ValueError otherwise)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    nbytes = int(float(match.group(1)) * _UNITS[match.group(2).upper()]) if match else 0
    if nbytes <= 0:
        raise ValueError(f"{text!r} is not a memory size (a number of bytes, or with K, M, G: 512M, 2G)")
    return nbytes


def size_text(nbytes: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if nbytes >= _UNITS[unit]:
            return f"{nbytes / _UNITS[unit]:.3g} {unit}iB"
    return f"{nbytes} bytes"


def check(nbytes: int, what: str) -> None:
    """OUT_OF_MEMORY when ``what`` (the thing to allocate) takes more than the budget."""
    if nbytes > _limit:
        raise NnapiError(ResultCode.OUT_OF_MEMORY,
                         f"{what}: {size_text(nbytes)}, over nnts's memory budget of {size_text(_limit)} "
                         f"(NNTS_MEMORY_BUDGET raises it)")
