"""A process's resources, watched over many executions: open file descriptors, threads, mapped
regions and resident memory, read from Linux's ``/proc``. A driver that leaks one of them per
execution shows as growth proportional to the executions; the messages say by how much per
execution of which path ("fd count grew by 1 per fenced execution over 2,000 executions").
Used by the CTS soak tests (this process, an in-process driver) and ``nnts stress`` (the driver's
own process)."""
from __future__ import annotations

import os
from pathlib import Path

RESOURCES = ("fd count", "thread count", "mapped regions", "resident memory (KiB)")
# Growth tolerated over a watched run, whatever its length: pools, caches and worker threads a
# correct driver keeps, the interpreter's own arenas. A leak of one per execution exceeds it within
# a few dozen executions.
SLACK = {"fd count": 16, "thread count": 8, "mapped regions": 32, "resident memory (KiB)": 16 * 1024}


def available(pid: int | str = "self") -> bool:
    return Path(f"/proc/{pid}/status").exists()


def sample(pid: int | str = "self") -> dict[str, int]:
    """The resources of process ``pid`` now (``self``: this process)."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.split()
    with open(f"/proc/{pid}/maps", "rb") as maps:
        regions = sum(1 for _ in maps)
    return {"fd count": len(os.listdir(f"/proc/{pid}/fd")), "thread count": int(status["Threads"][0]),
            "mapped regions": regions, "resident memory (KiB)": int(status["VmRSS"][0])}


def leaks(before: dict[str, int], after: dict[str, int], executions: int, what: str) -> list[str]:
    """A message per resource that grew beyond its slack between two samples ``executions``
    executions (of ``what``: "fenced execution") apart; empty when none did."""
    messages = []
    for name in RESOURCES:
        grew = after[name] - before[name]
        if grew <= SLACK[name]:
            continue
        per = grew / executions
        rate = f"by {per:.3g} per {what}" if per >= 0.5 else f"by {grew:,} ({what}s: 1 per {executions / grew:.0f})"
        messages.append(f"{name} grew {rate} over {executions:,} {what}s ({before[name]:,} -> {after[name]:,})")
    return messages
