"""The nnts pytest plugin: ``pytest cts vts --driver=...`` in a clone, ``pytest --pyargs nnts.cts nnts.vts
--driver=...`` anywhere nnts is installed (registered through the ``pytest11`` entry point).

Options: ``--driver`` (``reference``, ``module.path:factory``, ``remote:COMMAND`` or ``socket:PATH``,
comma-separated for several; ``--isolate`` serves in-process drivers from a process of their own),
``--vectors PATH`` (extra test-vector files or folders; ``../shared/vectors`` when present),
``--feature-level N`` (test only what that level requires), ``--expected-failures FILE`` (known
driver issues: xfail, warned about when they pass), ``--report PATH`` (conformance report: HTML, or
JSON for a .json path; repeatable; ``--baseline EARLIER.json`` compares with an earlier run),
``--reproducers DIR`` (where failing models are saved), ``--shard K/N`` (a deterministic part of
the run, see ``nnts.runners.shard``), ``--call-timeout S`` (a remote driver's budget per call),
``--variants LIST`` (the generated tests' variants to run). A bad ``--driver``, ``--shard`` or
``--baseline`` stops the session before collection, in one line.

A test during which an out-of-process driver crashed or hung fails with CRASH or HANG and the
driver's exit status or the call that did not return, whatever the test itself concluded (the
runtime may have fallen back to the CPU); the next test gets a fresh driver process.

A generated test runs one test model's variants in turn (``nnts.runners.variants``). Generated tests carry
the markers ``op_<OPERATION>`` and ``dtype_<OPERAND TYPE>``, so ``-m op_CONV_2D`` or
``-k "CONV_2D and QUANT8"`` select them. Under pytest-xdist every worker collects the same tests in
the same order and loads its drivers once.

pytest loads this plugin in every run on a machine where nnts is installed, the driver team's
unrelated runs too: it imports the drivers, the reports (jinja2) and the rest of the runners inside
the hooks that use them, so a run that is not the suite's does not load them.

The environment is read here (option defaults and ``pytest_configure``: :class:`nnts.runners.settings.Settings`,
``nnts.vts.Sizes``), in the controller and in each xdist worker, and kept on the config.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import tempfile
from importlib import resources
from pathlib import Path

import pytest

from nnapi_ref.types import OperandCode, OperationCode
from nnts.runners import ordering, variants


def pytest_addoption(parser):
    group = parser.getgroup("nnts", "NNAPI driver conformance")
    group.addoption("--driver", default=os.environ.get("NNTS_DRIVER", "reference"),
                    help="driver(s) under test, comma-separated: reference, onnxruntime, tflite, tflite-ref, "
                         "module.path:factory, remote:COMMAND or socket:PATH")
    group.addoption("--vectors", action="append", default=[],
                    help="extra test-vector files or folders (default: ../shared/vectors when present)")
    group.addoption("--no-shared-vectors", action="store_true", help="do not add ../shared/vectors")
    group.addoption("--feature-level", type=int, default=None, help="test only what this feature level requires")
    group.addoption("--expected-failures", default=None, type=_expected_failures,
                    help="file of test ids, variant ids (TEST-ID-VARIANT) or model names expected to fail, or a "
                         "published list: onnxruntime, tflite, tflite-ref")
    group.addoption("--report", action="append", default=[],
                    help="write the conformance report to this path: HTML, or JSON for a .json path (repeatable)")
    group.addoption("--nnts-command", default=None, help=argparse.SUPPRESS)  # the command the user typed (nnts test)
    group.addoption("--baseline", default=None,
                    help="an earlier --report JSON: the report names newly failing, passing and unsupported tests")
    group.addoption("--reproducers", default=None,
                    help="folder for failing models (default: reproducers/ beside the first --report, "
                         "else nnts-reproducers in the temporary folder)")
    group.addoption("--random-graphs", type=int, default=200,
                    help="number of random-graph cases (cts/test_random_graph.py)")
    group.addoption("--random-seed", type=int, default=0, help="seed of the first random-graph case")
    group.addoption("--random-ops", type=int, default=200,
                    help="number of single-operation random cases (cts/test_random_operation.py)")
    group.addoption("--isolate", action="store_true",
                    help="run in-process drivers in a process of their own (nnts serve), to contain crashes")
    group.addoption("--shard", default=None, metavar="K/N",
                    help="run only the K-th of N deterministic parts of the selected tests (the N parts are the "
                         "whole run; merge their --report JSON with nnts report merge)")
    group.addoption("--call-timeout", type=float, default=None,
                    help="seconds a remote driver may take to answer one call before it is declared hung "
                         "(default 60; prepare: 120)")
    group.addoption("--nnts-trace", default=None, metavar="PATH",  # pytest's own --trace starts pdb
                    help="write a Chrome trace-event JSON of the run (NNTS_TRACE; xdist workers write PATH.PID.json)")
    ordering.add_options(group)
    variants.add_options(group)


def _expected_failures(value: str) -> str:
    from nnts.formats.expected_failures import expected_failures_file
    return expected_failures_file(value)


def pytest_configure(config):
    _check_options(config)
    config.nnts_settings, config.nnts_vts = _settings(config)
    for code in OperationCode:
        config.addinivalue_line("markers", f"op_{code.name}: tests of the {code.name} operation")
    for name in dict.fromkeys(c.name for c in OperandCode):
        config.addinivalue_line("markers", f"dtype_{name}: tests with {name} operands")
    config.addinivalue_line("markers", "vts: driver-level tests (straight against the driver interface)")
    config.addinivalue_line("markers", "extension: tests of vendor extensions (counted in a section of their own)")
    if config.getoption("baseline") and not hasattr(config, "workerinput"):
        from nnts.reports.results import ResultsError, load
        try:
            load(config.getoption("baseline"))
        except ResultsError as e:  # before the run, not after it
            raise pytest.UsageError(f"--baseline: {e}") from None
    if not hasattr(config, "workerinput"):  # an xdist worker's reports are gathered by the controller
        config.pluginmanager.register(ConformanceResults(), "nnts-results")
    if not config.getoption("reproducers"):
        reports = config.getoption("report")
        config.option.reproducers = str(Path(reports[0]).parent / "reproducers") if reports else \
            os.path.join(tempfile.gettempdir(), "nnts-reproducers")
    from nnts.runners import shard
    try:
        config.nnts_shard = shard.parse(config.getoption("shard"))
    except ValueError as e:
        raise pytest.UsageError(f"nnts: {e}") from None
    if not hasattr(config, "workerinput"):
        config.nnts_drivers = _checked_drivers(config)
    config.pluginmanager.register(ordering.OrderPlugin(), "nnts-order")


def _settings(config):
    """This process's settings, from the environment with ``--nnts-trace`` and ``--call-timeout``
    over it (written back to the environment first, for the xdist workers to inherit), switched on."""
    from nnts.runners.settings import Settings
    from nnts.vts import Sizes
    path = config.getoption("nnts_trace")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        from nnapi_ref import trace
        os.environ["NNTS_TRACE"], os.environ["NNTS_TRACE_OWNER"] = path, str(os.getpid())
        try:
            trace.start(path)
        except ValueError as e:
            raise pytest.UsageError(f"--nnts-trace: {e}") from None
    if config.getoption("call_timeout"):
        os.environ["NNTS_CALL_TIMEOUT"] = str(config.getoption("call_timeout"))
    try:
        settings, sizes = Settings.from_environment(os.environ), Sizes.from_environment(os.environ)
    except ValueError as e:
        raise pytest.UsageError(f"nnts: {e}") from None
    settings.start(os.environ)
    return settings, sizes


def _checked_drivers(config):
    """The drivers of ``--driver``, loaded once before collection: a bad one stops the session here
    with one line (not a traceback in every test after minutes of collection). A driver process
    is stopped again at once (xdist workers start their own; a later call restarts it)."""
    spec = config.getoption("driver")
    if spec.strip() == "reference":
        return None  # always loads; loaded when a test first asks for it
    from nnapi_ref.errors import NnapiError
    from nnts.runners.drivers import FORMS, load_drivers
    try:
        drivers = load_drivers(spec, isolate=config.getoption("isolate"), settings=config.nnts_settings,
                               incidents=_incident_log(config))
    except NnapiError as e:
        hint = "" if FORMS in e.message else f" (--driver takes {FORMS})"
        raise pytest.UsageError(f"nnts: {e.message}{hint}") from None
    for d in drivers:
        if hasattr(d, "close"):
            d.close()
    return drivers


def pytest_collection_modifyitems(session, config, items):
    from nnts.runners.vector_errors import add_items
    add_items(session, items)  # a test-vector file that cannot be read: a failing test, not the end
    vts = Path(str(resources.files("nnts.vts")))
    in_vts: dict[str, bool] = {}  # per file: Path.parents of 48k items took seconds
    for item in items:
        path = str(item.path)
        if path not in in_vts:
            in_vts[path] = vts in Path(path).parents
        if in_vts[path] and not any(mark.name == "vts" for mark in item.own_markers):  # most carry it already
            item.add_marker(pytest.mark.vts)
    _select_shard(config, items)


def _select_shard(config, items) -> None:
    """``--shard K/N``: keep this shard's tests, named the same in a clone and installed
    (``cts/test_generated.py::...``), so shards of either kind of run line up."""
    from nnts.runners import shard
    part = config.nnts_shard
    if part is None:
        return
    keep, drop = [], []
    for item in items:
        name = f"{_short_path(str(item.fspath))}::{item.nodeid.split('::', 1)[-1]}"
        (keep if shard.selects(part, name) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@functools.lru_cache(maxsize=None)
def _short_path(path: str, stem: bool = False) -> str:
    """``cts/test_generated.py`` (``cts/test_generated`` with ``stem``) of a test file's path,
    clone or installed (once per file: Path of every one of 17,900 items took a second)."""
    parts = Path(path)
    return f"{parts.parent.name}/{parts.stem if stem else parts.name}"


def _check_options(config) -> None:
    """Options that name files or numbers: one usage line before collection, not a traceback."""
    from nnts.formats import files
    try:
        files.input_file("--expected-failures", config.getoption("expected_failures"))
        files.positive("--call-timeout", config.getoption("call_timeout"))
        for path in config.getoption("report"):  # its folder is created
            if not path or os.path.isdir(path):
                raise files.UsageError(f"--report {path!r}: a folder or an empty path, not a file")
    except files.UsageError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture(scope="session")
def driver_spec(pytestconfig) -> str:
    return pytestconfig.getoption("driver")


@pytest.fixture(scope="session")
def drivers(driver_spec, pytestconfig):
    """The HAL drivers under test, loaded once per (worker) process."""
    from nnts.runners.drivers import load_drivers
    return getattr(pytestconfig, "nnts_drivers", None) or load_drivers(
        driver_spec, isolate=pytestconfig.getoption("isolate"), settings=pytestconfig.nnts_settings,
        incidents=_incident_log(pytestconfig))


def _incident_log(config):
    """Where the drivers under test record their crashes and hangs, read after each test that
    uses them (made when they are first loaded)."""
    if not hasattr(config, "nnts_incidents"):
        from nnapi_ref.remote.client import IncidentLog
        config.nnts_incidents = IncidentLog()
    return config.nnts_incidents


@pytest.fixture(scope="session")
def driver(drivers):
    """The first driver under test (VTS tests one driver at a time)."""
    return drivers[0]


@pytest.fixture(scope="session")
def devices(drivers, pytestconfig):
    """The runtime's devices for the drivers under test (CTS), partitioned as the settings say."""
    from nnapi_ref.runtime import get_devices, set_drivers
    settings = pytestconfig.nnts_settings
    set_drivers(drivers, settings.partitioning, settings.shm_dir)
    return get_devices()


@pytest.fixture(scope="session")
def reference_devices():
    """The reference driver as a runtime device, for the random tests' expected values."""
    from nnapi_ref.drivers.reference import ReferenceDevice
    from nnapi_ref.runtime import Device
    return [Device(ReferenceDevice())]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    log = getattr(item.config, "nnts_incidents", None)
    item.nnts_incidents = log.mark() if log is not None else 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if "drivers" in getattr(item, "fixturenames", ()) and (report.when == "call" or (report.when == "setup" and not report.passed)):
        from nnts.formats.results import driver_died
        log = getattr(item.config, "nnts_incidents", None)
        new = log.since(getattr(item, "nnts_incidents", 0)) if log is not None else []
        died = driver_died(new)
        if died:
            concluded = report.longreprtext if report.failed else ""  # keeps a saved reproducer's name
            report.outcome = "failed"
            report.longrepr = "\n".join(i.message for i in new) + (
                f"\n\nThe test itself concluded:\n{concluded}" if concluded else "")
            report.user_properties.append(("nnts_verdict", died))
            item.nnts_incidents += len(new)
    if report.when == "call" or not report.passed:
        report.user_properties += _test_properties(item)  # item.user_properties too: JUnit's properties
    elif report.when == "setup":  # for the xdist controller, should the worker die in the call (pytest_handlecrashitem)
        report.user_properties = [*report.user_properties, *_test_properties(item)]
    if report.when == "setup":  # before the test drives the driver: a driver it crashes is not asked
        _describe_run_once(item, report)


def _test_properties(item) -> list[tuple]:
    """What the report says of a test besides its verdict: its operation and operand type, its
    section and variant, the module it is in."""
    case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
    op = getattr(item, "nnts_op", getattr(case, "operation", None))
    dtype = getattr(item, "nnts_dtype", getattr(case, "dtype", None))
    properties = [("nnts_op", op), ("nnts_dtype", dtype or "-")] if op is not None else []
    if item.get_closest_marker("extension") is not None:  # the report counts these apart
        properties.append(("nnts_section", "extension"))
    if getattr(case, "variant", None):
        properties.append(("nnts_variant", case.variant))
    # the part of the suite, also where --pyargs shortens test ids
    properties.append(("nnts_module", _short_path(str(item.fspath), stem=True)))
    return properties


_TEST_PROPERTIES = ("nnts_op", "nnts_dtype", "nnts_section", "nnts_variant", "nnts_module")
_running: dict[str, list[tuple]] = {}  # xdist controller: the properties of each test set up and not torn down


def pytest_runtest_logreport(report):
    if report.when == "setup" and report.passed:
        _running[report.nodeid] = [(k, v) for k, v in report.user_properties if k in _TEST_PROPERTIES]
    elif report.when == "teardown":
        _running.pop(report.nodeid, None)


_run_described = False


def _describe_run_once(item, report):
    """The drivers (as loaded in this process) and corpora, sent once per process with a report,
    so that the xdist controller, which loads no driver, can name them in the report."""
    global _run_described
    if _run_described or getattr(item, "funcargs", {}).get("drivers") is None:
        return  # a vector-file error item has none; --setup-plan sets up no fixture
    _run_described = True
    from nnts.reports.results import corpus_facts, driver_facts
    facts = {"drivers": driver_facts(item.funcargs["drivers"]), "corpora": corpus_facts(item.config)}
    report.user_properties = [*report.user_properties, ("nnts_run", json.dumps(facts))]  # this report's only


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """pytest-xdist: a worker died in a test (an in-process driver crashed, without --isolate).
    The test's verdict is CRASH, as under --isolate; xdist starts a new worker and goes on."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    name = getattr(worker, "id", "?")
    report.longrepr = (f"CRASH: the pytest-xdist worker {name} died while running this test (an in-process "
                       "driver that crashes takes its worker with it; --isolate runs the driver in a process "
                       "of its own and reports its exit status)")
    report.user_properties.append(("nnts_verdict", "crashed"))
    report.user_properties += _running.pop(crashitem, [])  # its operation and type, as its setup report gave them


class ConformanceResults:
    """Every test's result (nnts.reports.results.records_of_report), gathered from test reports (on the
    xdist controller too, which receives every worker's reports)."""

    def __init__(self):
        self.started = datetime.datetime.now()
        self.tests: list[dict] = []
        self.run_facts: dict = {"drivers": [], "corpora": []}

    def pytest_runtest_logreport(self, report):
        from nnts.reports.results import records_of_report, unique_facts
        props = dict(report.user_properties)
        if "nnts_run" in props:
            facts = json.loads(props["nnts_run"])
            for key in ("drivers", "corpora"):
                self.run_facts[key] = unique_facts(key, self.run_facts[key] + facts[key])
        self.tests += records_of_report(report, props)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    gathered = config.pluginmanager.get_plugin("nnts-results")
    results = gathered.tests if gathered is not None else []
    if not results:
        return
    from nnts.reports.results import unsupported_line
    unsupported = unsupported_line(results)
    if unsupported:  # one line: the report's Unsupported section has them one by one
        where = "the report's Unsupported section" if config.getoption("report") else "--report FILE.html"
        terminalreporter.write_line(f"nnts: {unsupported} (never counted as passed; each by operation, type "
                                    f"and reason: {where})")
    died = [t for t in results if t["status"] in ("crashed", "hung")]
    if died:
        terminalreporter.section("nnts: tests during which the driver crashed or hung")
        for t in died:
            terminalreporter.write_line(f"{'CRASH' if t['status'] == 'crashed' else 'HANG'} {t['id']}")
    xpassed = [t["id"] for t in results if t["status"] == "xpassed"]
    if xpassed:
        terminalreporter.section("nnts: expected failures that now pass (remove them from the list)")
        for nodeid in xpassed:
            terminalreporter.write_line(nodeid)
    if config.getoption("report"):
        from nnts.reports.conformance import write_reports
        for line in write_reports(config, gathered):
            terminalreporter.write_line(line)
