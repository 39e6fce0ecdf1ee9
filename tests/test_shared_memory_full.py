"""No room for a remote driver's data (a full /dev/shm, simulated by a file-size limit of 2 KiB
that makes reserving a region fail as a full tmpfs does; or an NNTS_SHM_DIR that does not exist):
one line before any test, naming the folder, not an error or a failure charged to the driver in
every test."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

NNTS = str(Path(sys.executable).parent / "nnts")
CORPUS = str(Path(__file__).resolve().parents[1] / "cts" / "corpus" / "arithmetic.json")
REMOTE = "remote:nnts serve reference"


def _full_shared_memory():
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))  # below one staging region


def _nnts(tmp_path, *args, shm_dir=None, full=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", **({"NNTS_SHM_DIR": shm_dir} if shm_dir else {}))
    done = subprocess.run([NNTS, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False, preexec_fn=_full_shared_memory if full else None)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("where", ["full", "missing"])
def test_no_shared_memory_is_one_line_before_any_test(tmp_path, where):
    room = {"full": {"full": True}, "missing": {"shm_dir": str(tmp_path / "no-such-folder")}}[where]
    reason = "File too large" if where == "full" else "no-such-folder: No such file or directory"
    code, out = _nnts(tmp_path, "vectors", "run", CORPUS, "--driver", REMOTE, **room)
    assert code == 2 and out.count("\n") == 1 and "no shared memory for its data" in out and reason in out, out
    code, out = _nnts(tmp_path, "test", "-p", "no:randomly", "--driver", REMOTE, "-k", "test_generated and ADD",
                      "--no-shared-vectors", "cts", **room)
    assert code == 4 and "no shared memory for its data" in out and reason in out, out[-2000:]
    assert "FAILED" not in out and "Traceback" not in out, out[-2000:]
