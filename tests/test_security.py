"""nnts on a machine it shares with other users, as root in CI: nothing of another user's making (a
planted link, a fuzz artifact's sidecar, a socket peer, a driver process, a report being merged)
makes it write, run or delete anything (docs/security.md). The other-user cases run a second user
(made here when running as root) and skip with the reason otherwise."""
import base64
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHER_USER = "nnts-other"


def nnts(*args, cwd, env=None, timeout=300, input=None):
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    environment.pop("NNTS_DRIVER", None)
    return subprocess.run([sys.executable, "-m", "nnts", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment, input=input, check=False)


def suite(*args, cwd, env=None, timeout=300):
    """pytest over the generated tests, run from ``cwd`` (the user's folder)."""
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    environment.pop("NNTS_DRIVER", None)
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "cts" / "test_generated.py"), "--rootdir",
                           str(ROOT), "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-shared-vectors",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment,
                          check=False)


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


# -- 3, 6, 7. a served socket is its owner's; nothing of another program's is replaced or removed --

def start_server(path, *extra, umask=None, cwd=None):
    def setup():
        if umask is not None:
            os.umask(umask)
    server = subprocess.Popen([sys.executable, "-m", "nnts", "serve", "reference", "--socket", str(path), *extra],
                              stderr=subprocess.PIPE, text=True, cwd=cwd or ROOT, preexec_fn=setup)
    for _ in range(400):
        if os.path.lexists(path) or server.poll() is not None:
            break
        time.sleep(0.05)
    return server


def stop(server, sig=signal.SIGTERM) -> str:
    if server.poll() is None:
        server.send_signal(sig)
    try:
        _, err = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        _, err = server.communicate()
    return err


def listening_socket(path) -> socket.socket:
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen(1)
    return other


def test_served_socket_is_private_whatever_the_umask(tmp_path):
    path = tmp_path / "driver.sock"
    server = start_server(path, umask=0)
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    finally:
        stop(server)


def connect_as(ids, path) -> bytes:
    """What a client of another user reads from the socket at ``path`` (a forked process: the
    test's Python may lie in a folder only its user can reach)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(reader)
            as_user(ids)()
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect(str(path))
            os.write(writer, b"connected:" + client.recv(1))
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as f:
        said = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and said.startswith(b"connected:"), (status, said)
    return said[len(b"connected:"):]


@pytest.fixture
def shared_folder():
    """A folder every user can reach (pytest's tmp_path is its user's only)."""
    folder = Path(tempfile.mkdtemp(prefix="nnts-security-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_served_socket_refuses_another_users_client(shared_folder, other_user):
    path = shared_folder / "driver.sock"
    server = start_server(path)
    try:
        os.chmod(path, 0o666)  # even where the mode lets them in, their credentials do not
        assert connect_as(other_user, path) == b""  # accepted, then closed unanswered
    finally:
        err = stop(server)
    assert f"refused a client of uid {other_user[0]}" in err


def test_serve_leaves_a_live_socket_of_another_program_alone(tmp_path):
    path = tmp_path / "driver.sock"
    other = listening_socket(path)
    try:
        done = nnts("serve", "reference", "--socket", str(path), cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and "a server is listening there" in done.stderr, done.stderr
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        other.close()


def test_serve_removes_at_exit_only_the_socket_it_made(tmp_path):
    path = tmp_path / "driver.sock"
    server = start_server(path)
    os.unlink(path)
    other = listening_socket(path)  # another program's socket now
    try:
        stop(server, signal.SIGINT)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        other.close()


def test_serve_leaves_no_socket_after_sigterm(tmp_path):
    path = tmp_path / "driver.sock"
    server = start_server(path)
    assert os.path.lexists(path)
    stop(server)
    assert not os.path.lexists(path) and os.listdir(tmp_path) == []


def test_serve_replaces_only_a_stale_socket_of_its_own_user(tmp_path):
    path = tmp_path / "driver.sock"
    listening_socket(path).close()  # left behind: nobody listens
    server = start_server(path)
    try:
        assert server.poll() is None and stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        stop(server)


def test_anything_at_a_predictable_staging_name_does_not_stop_the_server(tmp_path):
    script = ("import os, sys, threading, time\n"
              "from nnapi_ref.drivers.reference import ReferenceDevice\n"
              "from nnapi_ref.remote.server import serve_socket\n"
              "path = sys.argv[1]\n"
              "open(os.path.join(os.path.dirname(path), f'.nnts-serve-{os.getpid()}'), 'w').close()\n"
              "errors = []\n"
              "def run():\n"
              "    try:\n        serve_socket(ReferenceDevice(), path)\n"
              "    except BaseException as e:\n        errors.append(e)\n"
              "threading.Thread(target=run, daemon=True).start()\n"
              "for _ in range(400):\n"
              "    if os.path.exists(path) or errors:\n        break\n"
              "    time.sleep(0.05)\n"
              "sys.exit(0 if os.path.exists(path) and not errors else f'not listening: {errors}')\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "driver.sock")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


# -- 4. a driver process cutting shared memory fails itself, never the harness -----------------

CUTTING_DRIVER = '''
import glob, os
from nnapi_ref.drivers.reference import ReferenceDevice, ReferencePreparedModel

class CuttingPrepared(ReferencePreparedModel):
    def execute_synchronously(self, *args, **kwargs):
        result = super().execute_synchronously(*args, **kwargs)
        for path in glob.glob(os.path.join(os.environ["NNTS_SHM_DIR"], "nnts-*")):
            if not path.endswith(".lock"):
                os.truncate(path, 0)
        return result

class Cutting(ReferenceDevice):
    def prepare_model(self, *args, **kwargs):
        prepared = super().prepare_model(*args, **kwargs)
        prepared.__class__ = CuttingPrepared
        return prepared

def make():
    return Cutting()
'''


def test_a_driver_cutting_shared_memory_is_its_failure_and_the_report_is_written(tmp_path):
    (tmp_path / "cutting.py").write_text(CUTTING_DRIVER)
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    report = tmp_path / "out" / "conformance.json"
    done = suite("--driver", f"remote:{sys.executable} -m nnts serve cutting:make", "-k",
                 "nnts_add_quant8_relu or nnts_mul_broadcast_float32", "--variants", "sync", "--report", str(report),
                 cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "NNTS_SHM_DIR": str(shm_dir)})
    assert done.returncode == 1, (done.returncode, done.stdout[-3000:], done.stderr[-2000:])
    tests = json.loads(report.read_text())["tests"]
    assert tests and all(t["status"] in ("failed", "crashed") for t in tests), tests
    assert any("cut shared memory" in (t["message"] or "") for t in tests), [t["message"] for t in tests]


# -- 8. only this user's regions of processes that are gone are removed ---------------------------

def test_regions_of_live_processes_and_other_users_are_kept(tmp_path, other_user):
    from nnapi_ref.remote import shm
    folder = tmp_path / "shm"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o1777)
    gone = 2 ** 22 + 12345  # a process id no process has here
    foreign = folder / f"nnts-{gone}-1"  # another user's, or a live process's in another PID namespace
    foreign.write_bytes(b"x")
    os.chown(foreign, *other_user)
    # A live process of this user, holding its regions (it may live in another PID namespace).
    allocate = ("import os, sys, time\nfrom nnapi_ref.remote import shm\n"
                "a = shm.allocate(64, sys.argv[1])\nprint(shm.find(a)[0].path, flush=True)\n")
    holder = subprocess.Popen([sys.executable, "-c", allocate + "time.sleep(60)\n", str(folder)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        live = Path(holder.stdout.readline().strip())
        # A process of this user that is gone, whose regions are left.
        subprocess.run([sys.executable, "-c", allocate + "os._exit(0)\n", str(folder)], check=True,
                       capture_output=True, text=True, cwd=ROOT)
        left = [p for p in folder.iterdir() if p != foreign and p.parent == folder
                and not p.name.startswith(live.name.rsplit("-", 1)[0])]
        assert left, list(folder.iterdir())
        shm.remove_stale_files(str(folder))
        assert live.exists() and foreign.exists()
        assert not any(p.exists() for p in left)
    finally:
        holder.kill()
        holder.wait()


# -- 5. paths and commands in a driver's message or a merged report are text, never files ---------

EVIL_DRIVER = '''
import os
from nnapi_ref.drivers.reference import ReferenceDevice, ReferencePreparedModel
from nnapi_ref.hal import ErrorStatus, HalError

class EvilPrepared(ReferencePreparedModel):
    def execute_synchronously(self, *args, **kwargs):
        raise HalError(ErrorStatus.GENERAL_FAILURE, os.environ["EVIL_MESSAGE"])

class Evil(ReferenceDevice):
    def prepare_model(self, *args, **kwargs):
        prepared = super().prepare_model(*args, **kwargs)
        prepared.__class__ = EvilPrepared
        return prepared

def make():
    return Evil()
'''


@pytest.fixture
def victim(tmp_path):
    """A user's folder with a model file, a picture beside it and a secret picture."""
    folder = tmp_path / "victim"
    folder.mkdir()
    shutil.copy(ROOT / "cts" / "corpus" / "arithmetic.json", folder / "model.json")
    (folder / "model.svg").write_text("precious\n")
    (folder / "secret.svg").write_text("<svg>SECRET-PICTURE</svg>\n")
    return folder


def embedded(path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def test_a_driver_message_naming_files_and_commands_is_not_taken(tmp_path, victim):
    (tmp_path / "evil.py").write_text(EVIL_DRIVER)
    message = (f"broken\nreproducer: {victim / 'model.json'}\ngraph: {victim / 'secret.svg'}\n"
               f"replay: nnts vectors run x; touch PWNED\n")
    done = suite("--driver", "evil:make", "-k", "nnts_add_quant8_relu", "--variants", "sync", "--report",
                 "out/r.json", "--report", "out/r.html", cwd=tmp_path,
                 env={"PYTHONPATH": str(tmp_path), "EVIL_MESSAGE": message})
    assert "1 failed" in done.stdout, done.stdout[-2000:]
    assert (victim / "model.svg").read_text() == "precious\n"
    page = (tmp_path / "out" / "r.html").read_text()
    assert "SECRET-PICTURE" not in page and embedded(victim / "secret.svg") not in page
    (test,) = json.loads((tmp_path / "out" / "r.json").read_text())["tests"]
    assert test["reproducer"] == "out/reproducers/nnts_add_quant8_relu.json" and test["graph"] is None
    assert test["replay"].startswith("nnts vectors run out/reproducers/nnts_add_quant8_relu.json --driver evil:make")


def test_a_merged_report_naming_files_and_commands_is_not_taken(tmp_path, victim):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz): nothing would be drawn")
    (tmp_path / "evil.py").write_text(EVIL_DRIVER)
    suite("--driver", "evil:make", "-k", "nnts_add_quant8_relu", "--variants", "sync", "--report", "out/r.json",
          cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "EVIL_MESSAGE": "broken"})
    shard = tmp_path / "shard"
    shard.mkdir()
    data = json.loads((tmp_path / "out" / "r.json").read_text())
    data["tests"][0].update(reproducer=str(victim / "model.json"), graph=str(victim / "secret.svg"),
                            replay="nnts vectors run x; touch PWNED")
    (shard / "r.json").write_text(json.dumps(data))
    done = nnts("report", "merge", str(shard / "r.json"), "--html", "merged.html", "--json", "merged.json",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (victim / "model.svg").read_text() == "precious\n"
    page = (tmp_path / "merged.html").read_text()
    assert "SECRET-PICTURE" not in page and embedded(victim / "secret.svg") not in page and "PWNED" not in page
    assert json.loads((tmp_path / "merged.json").read_text())["tests"][0]["replay"] is None


# -- 9. an AOSP checkout's specs run with a time and an output bound --------------------------------

AOSP = ROOT.parent / "shared" / "aosp"
needs_aosp = pytest.mark.skipif(not (AOSP / "frameworks_ml").is_dir(), reason="needs ../shared/aosp (the AOSP snapshots)")


def checkout_with(tmp_path, spec: str) -> Path:
    checkout = tmp_path / "ml" / "nn"
    shutil.copytree(AOSP / "frameworks_ml" / "nn" / "tools", checkout / "tools")
    specs = checkout / "runtime" / "test" / "specs" / "V1_0"
    specs.mkdir(parents=True)
    shutil.copy(AOSP / "frameworks_ml" / "nn" / "runtime" / "test" / "specs" / "V1_0" / "add.mod.py", specs)
    (specs / "zz_hostile.mod.py").write_text(spec)
    return tmp_path / "ml"


@needs_aosp
def test_a_looping_spec_is_stopped_by_the_time_limit(tmp_path):
    checkout = checkout_with(tmp_path, "while True:\n    pass\n")
    done = nnts("vectors", "import-aosp", str(checkout), "--out", "out", "--timeout", "5", cwd=tmp_path, timeout=120)
    assert done.returncode == 1 and "still running after 5 s (stopped)" in done.stdout, done.stdout + done.stderr


@needs_aosp
def test_a_spec_printing_without_end_is_stopped_by_the_output_bound(tmp_path):
    checkout = checkout_with(tmp_path, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    done = nnts("vectors", "import-aosp", str(checkout), "--out", "out", cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and "MiB (stopped)" in done.stdout, done.stdout + done.stderr


@needs_aosp
def test_import_aosp_rejects_an_unknown_version_up_front(tmp_path):
    done = nnts("vectors", "import-aosp", str(AOSP / "frameworks_ml"), "--out", "out", "--versions", "NOPE",
                cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--versions NOPE" in done.stderr, done.stderr


# -- 10. what the NDK would refuse is refused: a missing cache folder is not created ---------------

def test_set_caching_does_not_create_a_missing_folder(tmp_path):
    from nnapi_ref.runtime import Compilation, Model
    from nnapi_ref.runtime.devices import get_devices
    from nnapi_ref.types import OperandCode, OperationCode
    model = Model()
    a = model.add_operand(OperandCode.TENSOR_FLOAT32, [2])
    b = model.add_operand(OperandCode.TENSOR_FLOAT32, [2])
    act = model.add_operand(OperandCode.INT32)
    out = model.add_operand(OperandCode.TENSOR_FLOAT32, [2])
    model.set_operand_value(act, 0)
    model.add_operation(OperationCode.ADD, [a, b, act], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    compilation = Compilation(model, get_devices()[:1])
    missing = tmp_path / "no" / "such" / "folder"
    compilation.set_caching(str(missing), bytes(32))
    compilation.finish()  # caching is best effort: compiled without it
    assert not (tmp_path / "no").exists()


# -- nothing left behind: the cache is bounded and clearable ------------------------------------------

def test_the_vector_cache_is_bounded_and_cleared_by_nnts_cache_clear(tmp_path):
    from nnts.runners import vector_cache
    folder = tmp_path / "cache"
    (folder / "vectors").mkdir(parents=True)
    for i in range(6):
        entry = folder / "vectors" / f"{i:064x}.bin"
        entry.write_bytes(b"x" * 1000)
        os.utime(entry, (1000 + i, 1000 + i))
    (folder / "vectors" / "not-ours.txt").write_text("kept")
    assert vector_cache.prune(folder, 3000) == 3
    assert sorted(p.name[-5:] for p in (folder / "vectors").glob("*.bin")) == ["3.bin", "4.bin", "5.bin"]
    done = nnts("cache", cwd=tmp_path, env={"NNTS_CACHE_DIR": str(folder)})
    assert done.returncode == 0 and "3 entries" in done.stdout, done.stdout + done.stderr
    done = nnts("cache", "clear", cwd=tmp_path, env={"NNTS_CACHE_DIR": str(folder)})
    assert done.returncode == 0 and "removed 3 entries" in done.stdout, done.stdout + done.stderr
    assert sorted(p.name for p in (folder / "vectors").iterdir()) == ["not-ours.txt"]


# -- SIGTERM (a CI timeout, docker stop) keeps what ran, as Ctrl-C does --------------------------------

SLOW_DRIVER = '''
import time
from nnapi_ref.drivers.reference import ReferenceDevice

class Slow(ReferenceDevice):
    def prepare_model(self, *args, **kwargs):
        with open("prepared.log", "a") as log:  # the test's progress mark (its folder is the cwd)
            log.write(".")
        time.sleep(0.2)
        return super().prepare_model(*args, **kwargs)

def make():
    return Slow()
'''


def terminated_after(command, prepares, cwd, env, sigint_ignored=False):
    """SIGTERM once the slow driver has prepared ``prepares`` models (some tests are done by
    then, however loaded the machine), and the exit status with the output. sigint_ignored: the
    command starts as a script's background job does, with SIGINT ignored."""
    ignore_sigint = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    process = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ignore_sigint)
    log = cwd / "prepared.log"
    deadline = time.monotonic() + 300
    while not (log.is_file() and log.stat().st_size >= prepares):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the slow driver prepared too few models in 300 s"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_sigterm_keeps_the_results_of_nnts_vectors_run(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_DRIVER)
    code, _, err = terminated_after(
        [sys.executable, "-m", "nnts", "vectors", "run", str(ROOT / "cts" / "corpus"), "--driver", "slow:make",
         "--jobs", "1", "--json", "out.json", "--junitxml", "out.xml"], 5, tmp_path, {"PYTHONPATH": str(tmp_path)})
    assert code == 130, (code, err[-2000:])
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["interrupted"] and data["passed"] > 0
    assert (tmp_path / "out.xml").is_file()


def test_sigterm_keeps_the_report_of_nnts_test(tmp_path):
    """Started as a CI script's background job (SIGINT ignored, which pytest inherits): SIGTERM
    still ends the run with the report of what ran."""
    (tmp_path / "slow.py").write_text(SLOW_DRIVER)
    code, _, _ = terminated_after(
        [sys.executable, "-m", "nnts", "test", "cts", "--driver", "slow:make", "-k", "test_generated", "-p",
         "no:randomly", "--no-shared-vectors", "--report", "out/r.json"], 25, tmp_path, {"PYTHONPATH": str(tmp_path)},
        sigint_ignored=True)
    assert code != 0
    data = json.loads((tmp_path / "out" / "r.json").read_text())
    assert data["totals"].get("passed"), data["totals"]


# -- inputs and outputs checked before the run: one line, nothing lost at the end -------------------

@pytest.mark.parametrize("args, says", [
    (["--report", "/proc/nnts-no-such/r.json"], "--report /proc/nnts-no-such/r.json: cannot be written"),
    (["--random-graphs", "-5"], "--random-graphs -5: must be a finite number >= 0"),
    (["--expected-failures", "late-latin1.txt"], "--expected-failures late-latin1.txt: not UTF-8 text (at byte 80003)"),
])
def test_nnts_test_refuses_bad_options_up_front(tmp_path, args, says):
    (tmp_path / "late-latin1.txt").write_bytes(b"# x\n" * 20000 + b"caf\xe9\n")  # bad past the first 64 KiB
    done = nnts("test", "cts", "-k", "test_generated and nnts_add_quant8_relu", "--no-shared-vectors", "-p",
                "no:randomly", *args, cwd=tmp_path)
    assert done.returncode != 0 and says in done.stdout + done.stderr, (done.stdout + done.stderr)[-2000:]
    assert "passed" not in done.stdout


def test_control_characters_in_a_test_name_are_shown_not_obeyed(tmp_path):
    from xml.etree import ElementTree
    corpus = json.loads((ROOT / "cts" / "corpus" / "arithmetic.json").read_text())
    test = next(t for t in corpus["tests"] if t["name"] == "nnts_add_quant8_relu")
    corpus["tests"] = [dict(test, name="bad\x01name\x1b[31m")]
    (tmp_path / "ctl.json").write_text(json.dumps(corpus))
    done = nnts("vectors", "run", "ctl.json", "--driver", "nnapi_ref.drivers.broken:wrong_add_quant8", "--junitxml",
                "out.xml", cwd=tmp_path)
    assert done.returncode == 1 and "FAILED bad\\x01name\\x1b[31m" in done.stdout, done.stdout
    assert "\x1b" not in done.stdout
    (case,) = ElementTree.parse(tmp_path / "out.xml").getroot().iter("testcase")
    assert case.get("name") == "bad\\x01name\\x1b[31m"


def test_a_fuzz_run_leaves_no_temporary_folder(tmp_path):
    pytest.importorskip("atheris", reason="the seed and corpus folders are atheris' (pip install atheris)")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = nnts("fuzz", "--driver", "reference", "--harness", "model", "--runs", "50", "--seed", "1", "--vectors",
                str(ROOT / "cts" / "corpus" / "arithmetic.json"), "--artifacts", "out/fuzz", cwd=tmp_path,
                env={"TMPDIR": str(scratch)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert list(scratch.iterdir()) == []


# -- every JSON reader checks types and depth first: one line, never a traceback -------------------

@pytest.mark.parametrize("field, value", [
    (("tests", 0, "message"), 5), (("tests", 0, "op"), [1]), (("meta", "command"), 3),
    (("meta", "drivers"), [{"name": [1]}]), (("meta", "corpora"), [{"path": {}, "models": "x"}]),
    (("tests", 0, "duration_s"), "x"), (("pytest",), "x")])
def test_report_merge_and_page_check_every_field(tmp_path, field, value):
    run = {"schema": "nnts-conformance/2", "meta": {"command": "pytest", "drivers": [], "corpora": []},
           "pytest": {"passed": 1}, "totals": {"passed": 1},
           "tests": [{"id": "cts/test_api.py::t", "part": "CTS API and runtime", "status": "passed", "message": None}]}
    node = run
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    (tmp_path / "r.json").write_text(json.dumps(run))
    for command in (["report", "merge", "r.json", "--html", "o.html"], ["report", "page", "r.json", "--html", "o.html"]):
        done = nnts(*command, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "should be" in done.stderr, done.stderr


def test_deeply_nested_json_is_one_line_everywhere(tmp_path):
    (tmp_path / "deep.json").write_text('{"schema": "nnts-conformance/2", "tests": ' + "[" * 50000 + "]" * 50000 + "}")
    (tmp_path / "artifact").write_bytes(b"x")
    (tmp_path / "artifact.json").write_text('{"harness": ' + "[" * 50000 + "]" * 50000 + "}")
    for command in (["report", "merge", "deep.json", "--html", "o.html"], ["report", "page", "deep.json", "--html", "o.html"],
                    ["fuzz", "--replay", "artifact"]):
        done = nnts(*command, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr and "nested deeper" in done.stderr, \
            (command, done.stderr[-1000:])


def test_merging_results_of_different_drivers_says_so(tmp_path):
    for name, driver in (("a.json", "reference"), ("b.json", "acme:make")):
        (tmp_path / name).write_text(json.dumps({"schema": "nnts-conformance/2", "meta": {"driver_spec": driver},
                                                 "tests": []}))
    done = nnts("report", "merge", "a.json", "b.json", "--json", "o.json", cwd=tmp_path)
    assert done.returncode == 0 and "2 different drivers (reference, acme:make)" in done.stderr, done.stderr


def test_trace_summary_of_a_malformed_trace_is_one_line(tmp_path):
    (tmp_path / "deep.json").write_text('{"traceEvents": ' + "[" * 50000 + "]" * 50000 + "}")
    (tmp_path / "wrong.json").write_text('{"traceEvents": 5}')
    for name, says in (("deep.json", "nested deeper"), ("wrong.json", "traceEvents: should be a list")):
        done = nnts("trace", "summary", name, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 2 and said.count("\n") == 1 and says in said, said
