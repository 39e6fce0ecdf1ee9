"""``--shard K/N``: a deterministic part of a run, for spreading one run over N machines.

A test belongs to shard ``crc32(name) % N + 1``: the same on every machine and under every test
order or worker count, so the N shards together are the whole run, each test in exactly one of
them, and each shard holds about 1/N of the tests (of every operation alike, since names of one
operation hash apart). The results of the shards merge into one report (``nnts report merge``).
"""
from __future__ import annotations

import zlib


def parse(text: str | None) -> tuple[int, int] | None:
    """``"K/N"`` as (K, N) with 1 <= K <= N; None for no sharding. ValueError names the problem."""
    if text is None:
        return None
    k, sep, n = text.partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit() or not 1 <= int(k) <= int(n):
        raise ValueError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. 2/3)")
    return int(k), int(n)


def selects(shard: tuple[int, int] | None, name: str) -> bool:
    """Whether the test called ``name`` is in ``shard`` (every test is in the whole run)."""
    if shard is None:
        return True
    k, n = shard
    return zlib.crc32(name.encode()) % n == k - 1
