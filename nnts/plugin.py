"""The nnts pytest plugin: ``pytest cts vts --driver=...`` in a clone, ``pytest --pyargs nnts.cts nnts.vts
--driver=...`` anywhere nnts is installed (registered through the ``pytest11`` entry point).

Options: ``--driver`` (``reference``, ``module.path:factory``, ``remote:COMMAND`` or ``socket:PATH``,
comma-separated for several; ``--isolate`` serves in-process drivers from a process of their own),
``--vectors PATH`` (extra test-vector files or folders; ``../shared/vectors`` when present),
``--feature-level N`` (test only what that level requires), ``--expected-failures FILE`` (known
driver issues: xfail, warned about when they pass), ``--report PATH`` (conformance report: HTML, or
JSON for a .json path; repeatable),
``--reproducers DIR`` (where failing models are saved), ``--call-timeout S`` (a remote driver's
budget per call).

A test during which an out-of-process driver crashed or hung fails with CRASH or HANG and the
driver's exit status or the call that did not return, whatever the test itself concluded (the
runtime may have fallen back to the CPU); the next test gets a fresh driver process.

Generated tests carry the markers ``op_<OPERATION>`` and ``dtype_<OPERAND TYPE>``, so
``-m op_CONV_2D`` or ``-k "CONV_2D and QUANT8"`` select them. Under pytest-xdist every worker
collects the same tests in the same order and loads its drivers once.
"""
from __future__ import annotations

import collections
import os
from importlib import resources
from pathlib import Path

import pytest

from nnapi_ref.types import OperandCode, OperationCode


def pytest_addoption(parser):
    group = parser.getgroup("nnts", "NNAPI driver conformance")
    group.addoption("--driver", default=os.environ.get("NNTS_DRIVER", "reference"),
                    help="driver(s) under test: reference, or module.path:factory (comma-separated)")
    group.addoption("--vectors", action="append", default=[],
                    help="extra test-vector files or folders (default: ../shared/vectors when present)")
    group.addoption("--no-shared-vectors", action="store_true", help="do not add ../shared/vectors")
    group.addoption("--feature-level", type=int, default=None, help="test only what this feature level requires")
    group.addoption("--expected-failures", default=None, help="file of test ids expected to fail (xfail)")
    group.addoption("--report", action="append", default=[],
                    help="write the conformance report to this path: HTML, or JSON for a .json path (repeatable)")
    group.addoption("--reproducers", default="out/reproducers", help="folder for failing models")
    group.addoption("--random-graphs", type=int, default=200,
                    help="number of random-graph cases (cts/test_random_graph.py)")
    group.addoption("--random-seed", type=int, default=0, help="seed of the first random-graph case")
    group.addoption("--isolate", action="store_true",
                    help="run in-process drivers in a process of their own (nnts serve), to contain crashes")
    group.addoption("--call-timeout", type=float, default=None,
                    help="seconds a remote driver may take to answer one call before it is declared hung "
                         "(default 60; prepare: 120)")


def pytest_configure(config):
    _check_options(config)
    if config.getoption("call_timeout"):
        os.environ["NNTS_CALL_TIMEOUT"] = str(config.getoption("call_timeout"))  # xdist workers inherit it
    for code in OperationCode:
        config.addinivalue_line("markers", f"op_{code.name}: tests of the {code.name} operation")
    for name in dict.fromkeys(c.name for c in OperandCode):
        config.addinivalue_line("markers", f"dtype_{name}: tests with {name} operands")
    config.addinivalue_line("markers", "vts: driver-level tests (straight against the driver interface)")
    config.pluginmanager.register(ConformanceResults(), "nnts-results")


def pytest_collection_modifyitems(session, config, items):
    from nnts.vector_errors import add_items
    add_items(session, items)  # a test-vector file that cannot be read: a failing test, not the end
    vts = Path(str(resources.files("nnts.vts")))
    for item in items:
        if vts in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vts)


def _check_options(config) -> None:
    """Options that name files or numbers: one usage line before collection, not a traceback."""
    from nnapi_ref import usage
    try:
        usage.input_file("--expected-failures", config.getoption("expected_failures"))
        usage.positive("--call-timeout", config.getoption("call_timeout"))
        for path in config.getoption("report"):  # its folder is created
            if not path or os.path.isdir(path):
                raise usage.UsageError(f"--report {path!r}: a folder or an empty path, not a file")
    except usage.UsageError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture(scope="session")
def driver_spec(pytestconfig) -> str:
    return pytestconfig.getoption("driver")


@pytest.fixture(scope="session")
def drivers(driver_spec, pytestconfig):
    """The HAL drivers under test, loaded once per (worker) process."""
    from nnapi_ref.drivers import load_drivers
    return load_drivers(driver_spec, isolate=pytestconfig.getoption("isolate"))


@pytest.fixture(scope="session")
def driver(drivers):
    """The first driver under test (VTS tests one driver at a time)."""
    return drivers[0]


@pytest.fixture(scope="session")
def devices(drivers):
    """The runtime's devices for the drivers under test (CTS)."""
    from nnapi_ref.runtime import get_devices, set_drivers
    set_drivers(drivers)
    return get_devices()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    from nnapi_ref.remote.client import incidents
    item.nnts_incidents = len(incidents())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if "drivers" in getattr(item, "fixturenames", ()) and (report.when == "call" or (report.when == "setup" and not report.passed)):
        from nnapi_ref.remote.client import incidents
        new = incidents()[getattr(item, "nnts_incidents", 0):]
        if new:  # the driver died or hung in this test: its verdict, whatever the test concluded
            kind = "hang" if any(i.kind == "hang" for i in new) else "crash"
            report.outcome = "failed"
            report.longrepr = "\n".join(i.message for i in new)
            report.user_properties.append(("nnts_verdict", kind))
            item.nnts_incidents += len(new)
    if report.when == "call" or (report.when == "setup" and report.skipped):
        case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
        op = getattr(item, "nnts_op", getattr(case, "operation", None))
        dtype = getattr(item, "nnts_dtype", getattr(case, "dtype", None))
        if op is not None:
            report.user_properties += [("nnts_op", op), ("nnts_dtype", dtype or "-")]


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """pytest-xdist: a worker died in a test (an in-process driver crashed, without --isolate).
    The test's verdict is CRASH, as under --isolate; xdist starts a new worker and goes on."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    name = getattr(worker, "id", "?")
    report.longrepr = (f"CRASH: the pytest-xdist worker {name} died while running this test (an in-process "
                       "driver that crashes takes its worker with it; --isolate runs the driver in a process "
                       "of its own and reports its exit status)")
    report.user_properties.append(("nnts_verdict", "crash"))


class ConformanceResults:
    """Outcomes per operation and data type, gathered from test reports (on the xdist
    controller too, which receives every worker's reports)."""

    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []  # (operation, data type, outcome, test id)

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        if "nnts_op" not in props or not (report.when == "call" or (report.when == "setup" and report.skipped)):
            return
        if "nnts_verdict" in props:
            outcome = props["nnts_verdict"]
        elif report.passed:
            outcome = "xpass" if hasattr(report, "wasxfail") else "pass"
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcome = "xfail" if hasattr(report, "wasxfail") else "unsupported" if "unsupported" in reason else "skip"
        else:
            outcome = "fail"
        self.rows.append((props["nnts_op"], props["nnts_dtype"], outcome, report.nodeid))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    results = config.pluginmanager.get_plugin("nnts-results").rows
    if not results or hasattr(config, "workerinput"):
        return
    unsupported = collections.Counter(op for op, _, outcome, _ in results if outcome == "unsupported")
    if unsupported:
        terminalreporter.section("nnts: operations the driver reported unsupported (skipped, not passed)")
        for op, n in sorted(unsupported.items()):
            terminalreporter.write_line(f"{op}: {n} tests skipped as unsupported")
    died = [(outcome, nodeid) for _, _, outcome, nodeid in results if outcome in ("crash", "hang")]
    if died:
        terminalreporter.section("nnts: tests during which the driver crashed or hung")
        for outcome, nodeid in died:
            terminalreporter.write_line(f"{outcome.upper()} {nodeid}")
    xpassed = [nodeid for _, _, outcome, nodeid in results if outcome == "xpass"]
    if xpassed:
        terminalreporter.section("nnts: expected failures that now pass (remove them from the list)")
        for nodeid in xpassed:
            terminalreporter.write_line(nodeid)
    for path in config.getoption("report"):
        from nnts.reports.conformance import write_report
        write_report(path, results, config.getoption("driver"))
        terminalreporter.write_line(f"nnts: conformance report written to {path}")
