"""``nnts test``: the conformance suites (CTS and VTS, installed as ``nnts.cts`` and ``nnts.vts``)
run through pytest from any folder, the same run as ``pytest cts vts`` in a clone.

Every option is pytest's or the nnts plugin's (``--driver``, ``-n``, ``-k``, ``-m``, ``--report``,
``--expected-failures``, ``--junitxml``, ``--random-graphs``, ``--lf``, ...), in any order with the
suite names (``cts``, ``vts``) and test ids (``cts/test_api.py::test_x``). Test ids are relative
to the suites' folder (pytest's rootdir here): the same in a clone and installed, printed as they
are in every summary line. The user's own pytest configuration is left out (``-c`` of an empty
file): the run is the suite's. pytest's cache (``--lf``, ``--ff``, ``--sw``) is ``.pytest_cache``
in the current folder, where pytest run there keeps it.

The pytest process loads this module as a plugin (``-p nnts.cli.suite``): it turns the suite names
and ids into the suites' paths, and says in the header where the ids are relative to.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib import resources

import pytest

SUITES = ("cts", "vts")
USAGE = """usage: nnts test [cts] [vts] [--driver DRIVER] [pytest options...]

Runs the conformance suites against a driver through pytest (both when none is named).
Common options: --driver (reference, onnxruntime, tflite, tflite-ref, module.path:factory,
remote:COMMAND, socket:PATH), -n N (parallel workers), -k EXPR, -m MARKER, -x,
--report out/conformance.html --report out/conformance.json, --expected-failures FILE,
--junitxml FILE, --random-graphs N, --vectors PATH, --feature-level N, --isolate,
--variants sync,async (the generated tests' variants to run), --lf / --ff / --sw (pytest's cache:
.pytest_cache in the current folder). Suite names, test ids (cts/test_api.py::test_x, as the
summary prints them) and options go in any order.
`nnts test --help-pytest` lists them all (the nnts group)."""


def register(sub) -> None:
    """``nnts test`` in the command list (its arguments are pytest's: ``main`` takes them as they are)."""
    sub.add_parser("test", help="run the conformance suites (CTS and VTS) against a driver through pytest "
                                "(nnts test --help)")


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv and argv[0] == "--help-pytest":
        argv = ["--help", *argv[1:]]
    args = [sys.executable, "-m", "pytest", "-p", __name__, "-c", os.devnull, "--rootdir", suites_folder(),
            "-p", "no:benchmark", "--nnts-command", shlex.join(["nnts", "test", *argv])]  # what the report shows
    if not any(a.endswith("no:cacheprovider") for a in argv):  # (its option exists only with the plugin)
        args += ["-o", f"cache_dir={os.path.abspath('.pytest_cache')}"]
    if not any(a == "--timeout" or a.startswith("--timeout=") for a in argv):
        args += ["-o", "timeout=300"]  # a test stuck in a hung in-process driver fails, the run goes on
    crash_folder = tempfile.mkdtemp(prefix="nnts-test-")  # private: what a crash of pytest leaves
    try:
        # pytest in a process of its own: it rewrites the asserts of nnts's modules, which this one
        # has imported already.
        child = subprocess.Popen([*args, "--nnts-crash-folder", crash_folder, *argv])
        # SIGTERM (a CI timeout, docker stop) reaches this process only: it is passed on, and
        # pytest (whose nnts plugin takes SIGTERM as Ctrl-C) writes the reports of what ran. Not
        # as SIGINT: a run started in the background by a script inherits SIGINT ignored.
        signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # pytest, in the same process group, got it too: let it report
                continue
        if code < 0:
            _tell_crash(crash_folder, -code)
            return 128 - code  # as a shell reports a process a signal ended
        return code
    finally:
        shutil.rmtree(crash_folder, ignore_errors=True)


def _tell_crash(folder: str, signum: int) -> None:
    """pytest died of a signal in one process: an in-process driver crashed it. The test it died
    in, the driver's last stderr lines in that test, the stack it died with and how to replay it;
    then the reports asked for, of what ran (between tests too)."""
    from nnts.runners.crash_notes import faulthandler_stack, last_lines, replay_lines
    try:
        with open(os.path.join(folder, "running.txt"), encoding="utf-8", errors="replace") as f:
            test, _, replay = f.read().partition("\n")
    except OSError:
        test = replay = ""
    message = None
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
    if not test:
        print(f"\nnnts: pytest was killed by {name}, in no test", file=sys.stderr, flush=True)  # (after pytest's dots)
    else:
        stderr = last_lines(os.path.join(folder, "stderr.txt"))
        stack = faulthandler_stack(os.path.join(folder, "faulthandler.txt"))
        replay = replay_lines(replay)
        what = (f"pytest was killed by {name} in this test (an in-process driver that crashes takes the run "
                "with it: -n N goes on with a new worker, --isolate runs the driver in a process of its own)"
                + (f"\nthe driver's last stderr lines (in this test):\n{stderr}" if stderr else "")
                + (f"\nits last words (faulthandler):\n{stack}" if stack else "")
                + (f"\n{replay}" if replay else ""))
        print(f"\nCRASH {test}: {what}", file=sys.stderr, flush=True)
        message = f"CRASH: {what}"
    try:  # the --report files: the tests that ended before the crash, and the one it happened in
        from nnts.reports.conformance import write_from_journal
        written = write_from_journal(os.path.join(folder, "results.jsonl"), test or None, message)
    except Exception as e:  # noqa: BLE001 (what was printed above stands)
        written = [f"nnts: conformance report NOT written: {e}"]
    for line in written:
        print(line, file=sys.stderr, flush=True)


def suites_folder() -> str:
    """The folder test ids are relative to, which holds ``cts/`` and ``vts/`` (the ``nnts`` package
    installed, or a clone)."""
    return os.path.dirname(str(resources.files("nnts.cts")))


# -- in the pytest process ----------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)  # before pytest's own, which reads the positionals as parsed
def pytest_load_initial_conftests(early_config, parser, args):
    """The suite names and test ids among the arguments, wherever they are, as the suites' paths
    (the suites' whole folders when none is named). Which argument is a positional one is
    pytest's own parser's call: ``-k cts`` names no suite."""
    root = suites_folder()
    named = False
    for position in _positionals(parser, args):
        value = args[position]
        if value in SUITES or value.startswith(tuple(f"{s}{sep}" for s in SUITES for sep in ("/", "::"))):
            args[position] = os.path.join(root, value)
            named = True
        elif os.path.exists(value.split("::")[0]):
            named = True
    if not named:
        args += [os.path.join(root, s) for s in SUITES]
    early_config.known_args_namespace.file_or_dir = parser.parse_known_args(args).file_or_dir


def _positionals(parser, args: list[str]) -> list[int]:
    """The indexes of the positional arguments of ``args``: those where a stand-in value turns up
    among the positionals pytest's parser finds."""
    found = parser.parse_known_args(args).file_or_dir
    probe = "nnts-positional-probe"
    return [i for i, value in enumerate(args) if value in found and
            probe in parser.parse_known_args([*args[:i], probe, *args[i + 1:]]).file_or_dir]


def pytest_configure(config):
    config.cwd_relative_nodeid = lambda nodeid: nodeid  # the ids are the suite's, wherever nnts test runs


@pytest.hookimpl(hookwrapper=True)
def pytest_report_header(config):
    """pytest's ``rootdir: ...`` and ``configfile: ../../dev/null`` as what they mean here."""
    outcome = yield
    outcome.force_result([_header_lines(config, part) if isinstance(part, list) else part
                          for part in outcome.get_result()])


def _header_lines(config, lines: list) -> list:
    shown = []
    for line in lines:
        if isinstance(line, str) and line.startswith("configfile:"):
            continue
        if isinstance(line, str) and line.startswith("rootdir:"):
            line = (f"rootdir: {config.rootpath} (the suites' folder: test ids cts/..., vts/... are relative to it; "
                    "no pytest configuration file is read)")
        shown.append(line)
    return shown
