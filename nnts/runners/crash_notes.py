"""What a crash of an in-process driver leaves to tell, read after the process it took with it
(an xdist worker, or pytest run by ``nnts test``) is gone: the last lines of the driver's standard
error, the stack faulthandler wrote as it died, and the replay lines of the test it died in."""
from __future__ import annotations

import os

BEFORE_THE_DRIVER = " (the model as it reached the driver)"


def replay_lines(replay: str) -> str:
    """``replay`` without the lines of a random test's reproducer that was not written (the test
    ended before the driver ran the model)."""
    lines = replay.splitlines()
    if lines and lines[0].startswith("reproducer: ") and lines[0].endswith(BEFORE_THE_DRIVER) and \
            not os.path.isfile(lines[0][len("reproducer: "):-len(BEFORE_THE_DRIVER)]):
        lines = lines[2:]
    return "\n".join(lines)


def last_lines(path: str, lines: int = 40) -> str:
    """The last ``lines`` lines of the file at ``path``, indented (none when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 64 * 1024))
            text = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(f"    {line.rstrip()}" for line in text[-lines:] if line.strip())


def faulthandler_stack(path: str, lines: int = 40) -> str:
    """The stack faulthandler wrote to ``path`` when the process died, indented: its innermost
    frames (the driver's), not pytest's below the test."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = [line.rstrip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return ""
    harness = next((i for i, line in enumerate(text) if "/_pytest/" in line or "/pluggy/" in line), len(text))
    return "\n".join(f"    {line}" for line in text[:min(harness, lines)])
