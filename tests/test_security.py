"""nnts on a machine it shares with other users, as root in CI: nothing of another user's making (a
planted link, a fuzz artifact's sidecar, a socket peer, a driver process, a report being merged)
makes it write, run or delete anything (docs/security.md). The other-user cases run a second user
(made here when running as root) and skip with the reason otherwise."""
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHER_USER = "nnts-other"


def nnts(*args, cwd, env=None, timeout=300, input=None):
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    environment.pop("NNTS_DRIVER", None)
    return subprocess.run([sys.executable, "-m", "nnts", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment, input=input)


def suite(*args, cwd, env=None, timeout=300):
    """pytest over the generated tests, run from ``cwd`` (the user's folder)."""
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    environment.pop("NNTS_DRIVER", None)
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "cts" / "test_generated.py"), "--rootdir",
                           str(ROOT), "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-shared-vectors",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment)


@pytest.fixture(scope="module")
def other_user():
    """The uid and gid of a second, unprivileged user (made when running as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second user (CI runs as root)")
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        if shutil.which("useradd") is None:
            pytest.skip("no useradd to make a second user")
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(OTHER_USER)
    return entry.pw_uid, entry.pw_gid


def as_user(ids):
    uid, gid = ids

    def become():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return become


# -- 1. failing models are saved in the user's folder, never through a planted link -------------

def test_reproducers_default_to_the_users_folder_not_a_shared_temporary_one(tmp_path):
    shared_tmp = tmp_path / "tmp"
    planted = shared_tmp / "nnts-reproducers"
    planted.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (planted / "nnts_add_quant8_relu.json").symlink_to(victim)
    work = tmp_path / "work"
    work.mkdir()
    done = suite("--driver", "nnapi_ref.drivers.broken:wrong_add_quant8", "-k", "nnts_add_quant8_relu",
                 "--variants", "sync", cwd=work, env={"TMPDIR": str(shared_tmp)})
    assert "1 failed" in done.stdout, done.stdout[-2000:]
    assert victim.read_text() == "precious\n"
    saved = work / "out" / "reproducers" / "nnts_add_quant8_relu.json"
    assert saved.is_file() and json.loads(saved.read_text())["tests"]
    assert stat.S_IMODE(saved.stat().st_mode) == 0o666 & ~_umask()


def test_a_link_planted_in_the_reproducer_folder_is_replaced_not_followed(tmp_path):
    folder = tmp_path / "reproducers"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (folder / "nnts_add_quant8_relu.json").symlink_to(victim)
    done = suite("--driver", "nnapi_ref.drivers.broken:wrong_add_quant8", "-k", "nnts_add_quant8_relu",
                 "--variants", "sync", "--reproducers", str(folder), cwd=tmp_path)
    assert "1 failed" in done.stdout, done.stdout[-2000:]
    assert victim.read_text() == "precious\n"
    assert not (folder / "nnts_add_quant8_relu.json").is_symlink()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- 2. a fuzz artifact's sidecar names no driver that is run -------------------------------------

def test_replay_never_runs_the_driver_an_artifacts_sidecar_names(tmp_path):
    (tmp_path / "evil.py").write_text("import pathlib\npathlib.Path('IMPORTED').write_text('x')\n"
                                      "def make():\n    raise SystemExit(3)\n")
    for i, driver in enumerate(("evil:make", f"remote:touch {tmp_path / 'STARTED'}")):
        artifact = tmp_path / f"execute-crash-{i}"
        artifact.write_bytes(b"\x01\x02\x03\x04" * 4)
        (tmp_path / f"execute-crash-{i}.json").write_text(json.dumps({"harness": "execute", "driver": driver,
                                                                      "vectors": ["/etc"]}))
        done = nnts("fuzz", "--replay", str(artifact), cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert "driver reference" in done.stdout and ascii(driver) in done.stdout, done.stdout
    assert not (tmp_path / "IMPORTED").exists() and not (tmp_path / "STARTED").exists()
