"""``nnts test``: the conformance suites (CTS and VTS, installed as ``nnts.cts`` and ``nnts.vts``)
run through pytest from any folder, the same run as ``pytest cts vts`` in a clone.

Every option after the suite names is pytest's or the nnts plugin's (``--driver``, ``-n``, ``-k``,
``-m``, ``--report``, ``--expected-failures``, ``--junitxml``, ``--random-graphs``, ...). The
user's own pytest configuration and cache are left out (``-c`` of an empty file, no cache or
benchmark folder): the run is the suite's, and it writes nothing the user did not ask for.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from importlib import resources

SUITES = {"cts": "nnts.cts", "vts": "nnts.vts"}
USAGE = """usage: nnts test [cts] [vts] [--driver DRIVER] [pytest options...]

Runs the conformance suites against a driver through pytest (both when none is named).
Common options: --driver (reference, onnxruntime, tflite, tflite-ref, module.path:factory,
remote:COMMAND, socket:PATH), -n N (parallel workers), -k EXPR, -m MARKER, -x,
--report out/conformance.html --report out/conformance.json, --expected-failures FILE,
--junitxml FILE, --random-graphs N, --vectors PATH, --feature-level N, --isolate,
--variants sync,async (the generated tests' variants to run).
`pytest --help` lists them all (the nnts group)."""


def register(sub) -> None:
    """``nnts test`` in the command list (its arguments are pytest's: ``main`` takes them as they are)."""
    sub.add_parser("test", help="run the conformance suites (CTS and VTS) against a driver through pytest "
                                "(nnts test --help)")


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    suites = []
    while argv and argv[0] in SUITES:
        suites.append(SUITES[argv.pop(0)])
    typed = shlex.join(["nnts", "test", *[s.removeprefix("nnts.") for s in suites], *argv])  # what the report shows
    args = [sys.executable, "-m", "pytest", "--pyargs", *(suites or SUITES.values()), "-c", os.devnull, "--rootdir", _package_root(),
            "-p", "no:cacheprovider", "-p", "no:benchmark"]
    args += ["--nnts-command", typed]
    if not any(a == "--timeout" or a.startswith("--timeout=") for a in argv):
        args += ["-o", "timeout=300"]  # a test stuck in a hung in-process driver fails, the run goes on
    # pytest in a process of its own: it rewrites the asserts of nnts's modules, which this one
    # has imported already.
    child = subprocess.Popen(args + argv)
    try:
        return child.wait()
    except KeyboardInterrupt:  # pytest, in the same process group, got it too: let it report
        return child.wait()


def _package_root() -> str:
    """The folder test ids are relative to: where the ``nnts`` package is (site-packages, or a clone)."""
    return os.path.dirname(os.path.dirname(str(resources.files("nnts.cts"))))

