"""What the project's tests share: the suite run against a driver in a subprocess."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_suite(driver: str, paths, selection: str, *options: str) -> tuple[int, str, list[str]]:
    """``pytest paths -k selection`` against ``driver`` in a subprocess, without the shared vectors
    and without plugins that reorder, cache or distribute; return (exit code, output, the node ids
    of the failed tests)."""
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               "-p", "no:xdist", "--no-shared-vectors", "--driver", driver, "-k", selection, "-rf", *options]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    return done.returncode, output, re.findall(r"^FAILED (\S+)", output, re.M)
