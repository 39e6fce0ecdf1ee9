"""Running a harness (``fuzz.harnesses``): ``nnts fuzz`` and ``nnts fuzz --replay``.

``nnts fuzz`` runs the harness in a child process (``python -m nnts.fuzz.engine``), because
libFuzzer owns the process it fuzzes in: a finding, a crash, a hang or running out of memory ends
the child, never the command. The child instruments ``nnapi_ref`` and the driver's package for
coverage (atheris), seeds the corpus with one input per test model, and hands over to libFuzzer;
without atheris it runs a plain seeded random-bytes loop over the same harness (no coverage
feedback) with the same per-input time limit, memory limit and artifacts. A finding is written
as ``ARTIFACTS/<harness>-crash-<sha1>`` (or ``-timeout-``, ``-oom-``) with a ``.json`` beside it
naming the harness, driver, seed files and byte provider (``--replay`` takes only the harness from
it: the driver and seeds it names are shown, never run or read). The child
also keeps the input it is running in a file (:class:`Recorded`), so a child that dies inside an
input before writing the artifact (a signal libFuzzer does not handle, the kernel's OOM killer)
still leaves it: the command saves it as a ``crash`` artifact.

Only the standard library is imported at the top: the child must import ``nnapi_ref`` inside
atheris' instrumentation.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import mmap
import os
import random
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile

from nnts.formats.files import UsageError, write_atomic
from nnts.fuzz.sidecar import read_sidecar

try:
    import atheris
except ImportError:
    atheris = None

PROVIDER = "atheris" if atheris is not None else "plain"
STAT = re.compile(r"stat::(\w+):\s*(\d+)")
PROGRESS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+ .*exec/s: (\d+)")
ARTIFACT = re.compile(r"Test unit written to (\S+)")
REFERENCE_BUG = re.compile(r"Reference bug written to (\S+)")


# The modules a harness tests, the only ones of nnapi_ref it instruments for coverage. Each traced
# branch costs every input time (atheris: some 0.2 us), and instrumenting a module costs start-up
# time, which libFuzzer's executions per second count; branches of what is not tested (the error
# class, the enums, the HAL's records, tracing, logging, the modules the seeds' loading runs) only
# steer the fuzzer toward inputs that differ there. A harness not listed instruments all of nnapi_ref.
UNDER_TEST = {
    "model": ("nnapi_ref.runtime.model", "nnapi_ref.validation", "nnapi_ref.ops.base", "nnapi_ref.extensions"),
}


def not_instrumented(harness: str) -> list[str]:
    """The modules of nnapi_ref that ``harness`` does not test (see UNDER_TEST), found without
    importing the package (its modules must be imported inside the instrumentation)."""
    tested = UNDER_TEST.get(harness)
    spec = importlib.util.find_spec("nnapi_ref")
    if tested is None or spec is None or not spec.submodule_search_locations:
        return []
    root = spec.submodule_search_locations[0]
    modules = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if os.path.exists(os.path.join(folder, d, "__init__.py"))]
        relative = os.path.relpath(folder, root)
        package = "nnapi_ref" if relative == "." else "nnapi_ref." + relative.replace(os.sep, ".")
        modules += [package if name == "__init__.py" else f"{package}.{name[:-3]}"
                    for name in files if name.endswith(".py")]
    return sorted(set(modules) - set(tested))


def driver_package(spec: str) -> str | None:
    """The top-level package of an in-process driver's module, to instrument; None for others."""
    if spec.startswith(("remote:", "socket:")) or ":" not in spec:
        return None
    return spec.partition(":")[0].split(".")[0]


def limit_memory(megabytes: int) -> None:
    """Address space beyond what the process has now plus ``megabytes`` fails with MemoryError:
    an allocation of a size a malformed input declares is a finding, not a swapping machine."""
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    limit = current + megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def load(harness: str, driver: str, vector_paths, settings=None):
    """The harness, set up (imports ``nnapi_ref``: call it inside the instrumentation);
    ``settings`` a :class:`nnts.runners.settings.Settings`, the defaults when None."""
    # nnapi_ref is imported here, inside atheris' instrumentation, never when this module loads.
    from nnts.fuzz import targets
    from nnts.runners.drivers import load_driver
    from nnts.runners.settings import Settings
    device = load_driver(driver, settings=settings or Settings()) if harness != "model" else None
    return targets.make(harness, device, vector_paths)


def settings_from_environment():
    """A fuzzing process's settings (NNTS_DRIVER, NNTS_CALL_TIMEOUT, ...), read by its entry point
    (this module's main, a ``*_fuzzer.py`` script), its logs and trace switched on; imports
    ``nnapi_ref``: call it inside the instrumentation."""
    from nnts.runners.settings import entry_point  # imports nnapi_ref: inside the instrumentation
    return entry_point(os.environ)


def seed_corpus_zip(harness: str, path: str, *vector_paths: str) -> None:
    """The seed corpus of a harness as the zip OSS-Fuzz expects (.clusterfuzzlite/build.sh)."""
    with zipfile.ZipFile(path, "w") as z:
        for i, data in enumerate(load(harness, "reference", list(vector_paths) or None).seed_inputs()):
            z.writestr(f"seed-{i}", data)


class Recorded:
    """A harness that writes each input to ``path`` before running it: b"R", the input's length
    (4 bytes, little-endian) and the input while it runs, the first byte turned to b"D" once it
    returned. The file is mapped into memory (shared), so recording costs no system call (on a
    virtual machine each costs microseconds); the kernel keeps what was written when the process
    dies.

    A bug of the reference (``harnesses.ReferenceBug``) is no finding against the driver under
    test: its input is saved as ``<prefix>reference-bug-<sha1>`` (the first input of each kind of
    exception), announced on a ``Reference bug written to`` line, and fuzzing goes on."""

    def __init__(self, harness, path: str, artifact_prefix: str = ""):
        from nnts.fuzz.harnesses import ReferenceBug  # imported by the harness already
        self.reference_bug = ReferenceBug
        self.harness = harness
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.record = self._mapped(1 << 16)  # libFuzzer's inputs: at most -max_len=4096 bytes
        self.artifact_prefix = artifact_prefix
        self.reference_bugs: set[str] = set()

    def _mapped(self, size: int) -> mmap.mmap:
        os.ftruncate(self.fd, size)
        return mmap.mmap(self.fd, size)

    def seed_inputs(self) -> list[bytes]:
        return self.harness.seed_inputs()

    def __call__(self, data: bytes) -> None:
        end = 5 + len(data)
        if end > len(self.record):  # a longer input (the plain loop's grow): a larger map
            self.record.close()
            self.record = self._mapped(2 * end)
        self.record[:end] = b"R" + len(data).to_bytes(4, "little") + data
        try:
            self.harness(data)
        except self.reference_bug as e:
            kind = type(e.__cause__).__name__
            if kind not in self.reference_bugs:
                self.reference_bugs.add(kind)
                path = f"{self.artifact_prefix}reference-bug-{hashlib.sha1(data).hexdigest()}"
                with open(path, "wb") as f:
                    f.write(data)
                print(f"==REFERENCE BUG: {e}", flush=True)
                traceback.print_exception(e.__cause__, file=sys.stdout)
                print(f"Reference bug written to {path}", flush=True)
        self.record[0] = ord("D")


def died_in(path: str) -> bytes | None:
    """The input a child was running when it died (see :class:`Recorded`), or None."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    if raw[:1] != b"R" or len(raw) < 5:
        return None
    return raw[5:5 + int.from_bytes(raw[1:5], "little")]


class _Timeout(BaseException):
    """The per-input time limit passed (a BaseException: no harness's ``except`` swallows it)."""


def _on_alarm(signum, frame):
    raise _Timeout()


def plain_loop(harness, args) -> int:
    """The harness under a seeded random-bytes loop: mutate a corpus entry (bytes changed,
    inserted, appended, cut), run it; the first finding is written as an artifact."""
    rng = random.Random(args.seed)
    corpus = harness.seed_inputs() or [b""]
    for folder in filter(None, [args.corpus]):
        corpus += [open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))]
    print("INFO: atheris is not installed: a plain seeded random-bytes loop, no coverage feedback", flush=True)
    signal.signal(signal.SIGALRM, _on_alarm)
    start = time.monotonic()
    runs, next_report = 0, 1
    while (args.runs < 0 or runs < args.runs) and (args.max_time <= 0 or time.monotonic() - start < args.max_time):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(data))
            op = rng.randrange(3)
            if op == 0 and data and at < len(data):
                data[at] = rng.randrange(256)
            elif op == 1:
                data[at:at] = rng.randbytes(rng.randint(1, 8))
            else:
                del data[at:at + rng.randint(1, 8)]
        data = bytes(data)
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        try:
            harness(data)
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            kind = "timeout" if isinstance(e, _Timeout) else "oom" if isinstance(e, MemoryError) else "crash"
            if isinstance(e, KeyboardInterrupt):
                raise
            print("=== Uncaught Python exception: ===" if kind != "timeout" else
                  f"==ERROR: the input ran past the {args.timeout} s limit", flush=True)
            traceback.print_exc(file=sys.stdout)
            path = f"{args.artifact_prefix}{kind}-{hashlib.sha1(data).hexdigest()}"
            with open(path, "wb") as f:
                f.write(data)
            print(f"artifact_prefix='{args.artifact_prefix}'; Test unit written to {path}", flush=True)
            return 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        runs += 1
        if runs >= next_report:
            elapsed = time.monotonic() - start
            print(f"#{runs}\tpulse  exec/s: {runs / max(elapsed, 1e-9):.0f} (no coverage measured)", flush=True)
            next_report *= 2
    elapsed = time.monotonic() - start
    print(f"stat::number_of_executed_units: {runs}\nstat::average_exec_per_sec: {runs / max(elapsed, 1e-9):.0f}",
          flush=True)
    return 0


def _has_seeds(harness: Recorded, vector_paths) -> bool:
    """Says how many seed inputs the test vectors gave; none is an error, not a campaign of noise."""
    count = len(harness.seed_inputs())
    if count:
        print(f"nnts fuzz: {count} seed inputs from the test vectors", flush=True)
    else:
        print(f"nnts fuzz: no seed inputs: no usable test model in {', '.join(vector_paths or ['the corpus'])}",
              flush=True)
    return count > 0


def _created_folders(path: str) -> list[str]:
    """Makes ``path`` and returns the folders that did not exist before, outermost first."""
    missing = []
    while path and not os.path.isdir(path):
        missing.insert(0, path)
        path = os.path.dirname(path)
    for folder in missing:
        os.makedirs(folder, exist_ok=True)
    return missing


def child(argv: list[str]) -> int:
    """The fuzzing process: ``python -m nnts.fuzz.engine`` with the options ``nnts fuzz`` passes."""
    p = argparse.ArgumentParser(prog="nnts.fuzz.engine")
    p.add_argument("--harness", required=True)
    p.add_argument("--driver", default="reference")
    p.add_argument("--vectors", action="append")
    p.add_argument("--corpus")
    p.add_argument("--artifact-prefix", required=True)
    p.add_argument("--runs", type=int, default=-1)
    p.add_argument("--max-time", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=10)
    p.add_argument("--rss-limit", type=int, default=2048)
    p.add_argument("--pending", required=True, help="file holding the input being run")
    args = p.parse_args(argv)
    limit_memory(args.rss_limit)
    if atheris is None:
        settings = settings_from_environment()
        harness = Recorded(load(args.harness, args.driver, args.vectors, settings), args.pending, args.artifact_prefix)
        return plain_loop(harness, args) if _has_seeds(harness, args.vectors) else 2
    include = ["nnapi_ref"] + [driver_package(args.driver)] * bool(driver_package(args.driver))
    with atheris.instrument_imports(include=include, exclude=not_instrumented(args.harness)):
        settings = settings_from_environment()
        harness = Recorded(load(args.harness, args.driver, args.vectors, settings), args.pending, args.artifact_prefix)
    if not _has_seeds(harness, args.vectors):
        return 2
    # In the scratch folder ``nnts fuzz`` runs this process in and removes after it (libFuzzer
    # ends the process: nothing after atheris.Fuzz() runs).
    seeds = tempfile.mkdtemp(prefix=f"seeds-{args.harness}-", dir=os.getcwd())
    for i, data in enumerate(harness.seed_inputs()):
        with open(os.path.join(seeds, f"seed-{i}"), "wb") as f:
            f.write(data)
    corpus = args.corpus or tempfile.mkdtemp(prefix=f"corpus-{args.harness}-", dir=os.getcwd())
    libfuzzer = [sys.argv[0], f"-artifact_prefix={args.artifact_prefix}", f"-timeout={args.timeout}",
                 f"-rss_limit_mb={args.rss_limit}", f"-seed={args.seed}", f"-runs={args.runs}",
                 f"-max_total_time={args.max_time}", "-max_len=4096", "-print_final_stats=1", corpus, seeds]
    atheris.Setup(libfuzzer, harness.__call__)
    atheris.Fuzz()
    return 0


# -- the command ---------------------------------------------------------------------------------

def _from_here(driver: str) -> str:
    """The driver as the child, which runs in a scratch folder, must name it: a ``remote:``
    program or a ``socket:`` path given relative to this folder made absolute."""
    kind, _, target = driver.partition(":")
    if kind == "socket" and target and not os.path.isabs(target):
        return f"socket:{os.path.abspath(target)}"
    if kind == "remote":
        try:
            words = shlex.split(target)
        except ValueError:
            return driver  # the child's driver loader says what is wrong with it
        if words and "/" in words[0] and not os.path.isabs(words[0]):
            return "remote:" + shlex.join([os.path.abspath(words[0])] + words[1:])
    return driver


def run(harness: str, driver: str, runs: int | None, max_time: float | None, corpus: str | None, seed: int,
        artifacts: str, vector_paths=None, timeout: int = 10, rss_limit: int = 2048) -> int:
    """``nnts fuzz``: the harness in a child process; progress passed through, then a summary.
    0 when nothing was found, 1 for a finding (or a child that died without one)."""
    out = sys.stdout
    # This process fuzzes in a child: it never loads the harnesses (nnapi_ref) before it must.
    from nnts.fuzz.harnesses import default_vector_paths
    from nnts.fuzz.targets import HARNESSES
    if harness not in HARNESSES:
        print(f"nnts fuzz: unknown harness {harness!r} (one of {', '.join(HARNESSES)})", file=sys.stderr)
        return 2
    vector_paths = [os.path.abspath(p) for p in (vector_paths or default_vector_paths())]
    artifacts = os.path.abspath(artifacts)
    created = _created_folders(artifacts)
    if corpus:
        corpus = os.path.abspath(corpus)
        os.makedirs(corpus, exist_ok=True)
    if runs is None and max_time is None:
        max_time = 60
    command = [sys.executable, "-m", "nnts.fuzz.engine", "--harness", harness, "--driver", _from_here(driver),
               "--artifact-prefix", os.path.join(artifacts, f"{harness}-"), "--seed", str(seed),
               "--timeout", str(timeout), "--rss-limit", str(rss_limit),
               "--runs", str(runs if runs is not None else -1), "--max-time", str(int(max_time or 0))]
    command += [a for p in vector_paths for a in ("--vectors", p)] + (["--corpus", corpus] if corpus else [])
    # The child runs in a scratch folder: a driver module of the caller's folder (or of a relative
    # PYTHONPATH entry) must still resolve there.
    paths = [os.getcwd()] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    print(f"nnts fuzz: harness {harness}, driver {driver}, {PROVIDER} "
          f"({'coverage-guided' if atheris else 'no atheris: plain seeded random bytes, no coverage'}), "
          f"seed {seed}, artifacts in {artifacts}", file=out, flush=True)
    start = time.monotonic()
    stats, progress, found, reference_bugs = {}, None, [], []
    with tempfile.TemporaryDirectory(prefix="nnts-fuzz-") as scratch:  # anything a harness names lands here
        pending = os.path.join(scratch, "pending-input")
        proc = subprocess.Popen(command + ["--pending", pending], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if m := PROGRESS.search(line):
                progress = m
            if m := STAT.search(line):
                stats[m.group(1)] = int(m.group(2))
            if m := ARTIFACT.search(line):
                found.append(m.group(1))
            if m := REFERENCE_BUG.search(line):
                reference_bugs.append(m.group(1))
        status = proc.wait()
        data = died_in(pending) if status != 0 and not found else None
        if data is not None:
            path = os.path.join(artifacts, f"{harness}-crash-{hashlib.sha1(data).hexdigest()}")
            with open(path, "wb") as f:
                f.write(data)
            print(f"nnts fuzz: the fuzzer died (exit status {status}) inside an input without writing it; "
                  f"the input is saved as {path}", file=out)
            found.append(path)
    elapsed = time.monotonic() - start
    for folder in reversed(created):  # made for findings there were none of
        if not os.listdir(folder):
            os.rmdir(folder)
    for path in found + reference_bugs:
        write_atomic(path + ".json", json.dumps({"harness": harness, "driver": driver, "vectors": vector_paths,
                                                 "provider": PROVIDER}))
    executions = stats.get("number_of_executed_units", int(progress.group(1)) if progress else 0)
    rate = stats.get("average_exec_per_sec", int(progress.group(5)) if progress else 0)
    if not rate and executions:  # libFuzzer's rate counts whole seconds: 0 for a run under one
        rate = round(executions / elapsed)
    coverage = f"cov {progress.group(2)}, ft {progress.group(3)}, corpus {progress.group(4)}" if progress \
        else "not measured"
    print(f"nnts fuzz: {harness}: {executions} executions in {elapsed:.0f} s ({rate} exec/s), coverage: {coverage}",
          file=out)
    for path in reference_bugs:
        print(f"REFERENCE BUG (the reference driver fails alike: a bug of nnapi_ref, not of the driver under test): "
              f"{path}\n  replay: {replay_command(path, 'reference', vector_paths)}", file=out)
    if found:
        for path in found:
            print(f"FINDING: {path}\n  replay: {replay_command(path, driver, vector_paths)}", file=out)
        return 1
    if status != 0:
        print(f"nnts fuzz: the fuzzer exited with status {status} without an artifact", file=out)
        return 1
    print("nnts fuzz: no findings", file=out)
    return 0


def replay_command(path: str, driver: str, vector_paths) -> str:
    """The whole command that replays an artifact: ``--replay`` takes nothing from the sidecar but the harness."""
    words = ["nnts", "fuzz", "--replay", path, "--driver", driver]
    for v in vector_paths or ():
        words += ["--vectors", v]
    return shlex.join(words)


def replay(path: str, harness: str | None, driver: str, vector_paths=None, settings=None) -> int:
    """``nnts fuzz --replay FILE``: run one artifact again, in this process, and show the traceback.
    The driver and vectors are the command line's: a sidecar comes with the artifact, from anyone,
    and what it names is never started, imported or read; only its harness (one of a fixed set)
    is taken."""
    from nnts.fuzz.targets import HARNESSES  # imports nnapi_ref: inside the instrumentation
    meta = read_sidecar(path)
    harness = harness or meta.get("harness") or os.path.basename(path).split("-")[0]
    if harness not in HARNESSES:
        raise UsageError(f"--replay {path}: no harness named by its sidecar or its name ({harness!a} is not one "
                         f"of {', '.join(HARNESSES)}); give --harness NAME")
    if meta.get("driver") and meta["driver"] != driver:
        print(f"nnts fuzz: note: the sidecar says the artifact was found with driver {meta['driver']!a}; "
              f"replayed on {driver} (give --driver to choose another)")
    if meta.get("vectors") and not vector_paths:
        print("nnts fuzz: note: the sidecar names seed vectors; give them with --vectors to use them")
    if meta.get("provider", PROVIDER) != PROVIDER:
        print(f"nnts fuzz: warning: found with the {meta['provider']!a} byte provider, replayed with {PROVIDER}")
    with open(path, "rb") as f:
        data = f.read()
    run_one = load(harness, driver, vector_paths, settings)
    print(f"nnts fuzz: replaying {path} ({len(data)} bytes) on harness {harness}, driver {driver}", flush=True)
    try:
        run_one(data)
    except Exception:
        traceback.print_exc()
        print("nnts fuzz: reproduced: the input fails")
        return 1
    print("nnts fuzz: the input runs without a finding")
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]))
