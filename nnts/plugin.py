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
import signal
import tempfile
from importlib import resources
from pathlib import Path

import pytest

from nnapi_ref.types import OperandCode, OperationCode
from nnts.runners import ordering, variants
from nnts.runners.crash_notes import BEFORE_THE_DRIVER, faulthandler_stack, last_lines, replay_lines


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
                    help="file of tests expected to fail, one a line with the reason after '#': test ids as the "
                         "summary prints them (cts/test_api.py::test_x), variant ids (TEST-ID-VARIANT), model "
                         "names, or globs ('*'); or a published list: onnxruntime, tflite, tflite-ref")
    group.addoption("--strict-expected-failures", action="store_true",
                    help="an expected failure that passes fails the run")
    group.addoption("--report", action="append", default=[],
                    help="write the conformance report to this path: HTML, or JSON for a .json path (repeatable)")
    group.addoption("--nnts-command", default=None, help=argparse.SUPPRESS)  # the command the user typed (nnts test)
    # nnts test: a private folder where a run in one process leaves what a crash of an in-process
    # driver should tell (the test, its replay, the driver's stderr), read when pytest dies
    group.addoption("--nnts-crash-folder", default=None, help=argparse.SUPPRESS)
    group.addoption("--baseline", default=None,
                    help="an earlier --report JSON: the report names newly failing, passing and unsupported tests")
    group.addoption("--reproducers", default=None,
                    help="folder for failing models (default: reproducers/ beside the first --report, "
                         "else out/reproducers in the current folder)")
    group.addoption("--random-graphs", type=int, default=200,
                    help="number of random-graph cases (the test_random_graph tests)")
    group.addoption("--random-seed", type=int, default=0, help="seed of the first random-graph case")
    group.addoption("--random-partitioned", type=int, default=50,
                    help="number of random graphs across devices, the driver's part and CPU fallback "
                         "(cts/test_random_partitioned.py; partial drivers only)")
    group.addoption("--random-ops", type=int, default=200,
                    help="number of single-operation random cases (the test_random_operation tests)")
    group.addoption("--random-chains", type=int, default=100,
                    help="number of rounding chains: a quantized operation, then a SUB that magnifies its "
                         "rounding (the test_random_chain tests)")
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
    config.nnts_expected = _load_expected(config)
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
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            # SIGTERM (a CI timeout, docker stop, Kubernetes) ends the run as Ctrl-C does: pytest
            # stops, and the report of what ran is written.
            signal.signal(signal.SIGTERM, signal.default_int_handler)
    if not config.getoption("reproducers"):
        reports = config.getoption("report")
        # The user's own folder, never a fixed name in a shared temporary folder (another user
        # could make it first and plant links there).
        config.option.reproducers = str(Path(reports[0]).parent / "reproducers") if reports else \
            str(Path(config.invocation_params.dir) / "out" / "reproducers")
    from nnts.runners import shard
    try:
        config.nnts_shard = shard.parse(config.getoption("shard"))
    except ValueError as e:
        raise pytest.UsageError(f"nnts: {e}") from None
    if not hasattr(config, "workerinput"):
        config.nnts_drivers = _checked_drivers(config)
    config.nnts_support = functools.cache(functools.partial(_support, config))
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
    if spec.strip() == "reference" and not config.getoption("isolate"):
        return None  # always loads; loaded when a test first asks for it
    from nnapi_ref.errors import NnapiError
    from nnts.runners.drivers import FORMS, load_drivers
    try:
        drivers = load_drivers(spec, isolate=config.getoption("isolate"), settings=config.nnts_settings,
                               incidents=_incident_log(config))
    except NnapiError as e:
        hint = "" if FORMS in e.message or "NNTS_SHM_DIR" in e.message else f" (--driver takes {FORMS})"
        raise pytest.UsageError(f"nnts: {e.message}{hint}") from None
    for d in drivers:
        if hasattr(d, "close"):
            d.close()
    return drivers


@pytest.hookimpl(tryfirst=True)  # before -k and --deselect: they see the ids it adds
def pytest_collection_modifyitems(session, config, items):
    from nnts.runners.vector_errors import add_items
    add_items(session, items)  # a test-vector file that cannot be read: a failing test, not the end
    _name_by_suite_id(config, items)
    _expect_failures(config, items)
    vts = Path(str(resources.files("nnts.vts")))
    in_vts: dict[str, bool] = {}  # per file: Path.parents of 48k items took seconds
    for item in items:
        path = str(item.path)
        if path not in in_vts:
            in_vts[path] = vts in Path(path).parents
        if in_vts[path] and not any(mark.name == "vts" for mark in item.own_markers):  # most carry it already
            item.add_marker(pytest.mark.vts)
    _select_shard(config, items)


def _name_by_suite_id(config, items) -> None:
    """Every test answers to its id relative to the suite (``cts/test_api.py::test_x``, as ``nnts
    test`` prints it) in ``-k`` and ``--deselect``, whatever pytest's rootdir (``pytest --pyargs``
    from another folder names the files by a path to site-packages)."""
    from nnts.formats.expected_failures import suite_id
    prefixes = tuple(config.getoption("deselect") or ())
    keep, drop = [], []
    for item in items:
        sid = suite_id(str(item.path), item.nodeid)
        item.extra_keyword_matches.add(sid)
        (drop if prefixes and sid.startswith(prefixes) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _expect_failures(config, items) -> None:
    """``--expected-failures``: a listed test is xfail (strict with ``--strict-expected-failures``);
    a generated test applies the list to each of its variants itself (``nnts.runners.variants``).
    Every entry that lists a collected test is noted, for the entries that list none (stale)."""
    listed = config.nnts_expected
    if listed is None:
        return
    from nnts.formats.expected_failures import names_of, variant_names
    strict = config.getoption("strict_expected_failures")
    files = set()
    for item in items:
        names = names_of(str(item.path), item.nodeid, item.name)
        files.add(names[0].split("::", 1)[0])
        case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
        if hasattr(case, "variants") and hasattr(case, "test"):  # a generated test
            for variant in case.variants:
                listed.mark_matching(variant_names(names, case.id, case.test.name, variant))
            continue
        listed.mark_matching(names)
        reason = listed.reason(names)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))
    config.nnts_stale = [(e.line, e.pattern, e.reason) for e in listed.stale(files)]
    if hasattr(config, "workeroutput"):  # for the xdist controller, which collects nothing
        config.workeroutput["nnts_stale"] = config.nnts_stale


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker's stale expected failures (every worker collects the same tests)."""
    stale = getattr(node, "workeroutput", {}).get("nnts_stale")
    if stale is not None:
        node.config.nnts_stale = [tuple(e) for e in stale]


def _select_shard(config, items) -> None:
    """``--shard K/N``: keep this shard's tests, named the same in a clone and installed
    (``cts/test_generated.py::...``), so shards of either kind of run line up."""
    from nnts.runners import shard
    part = config.nnts_shard
    if part is None:
        return
    keep, drop = [], []
    from nnts.formats.expected_failures import suite_id
    for item in items:
        (keep if shard.selects(part, suite_id(str(item.path), item.nodeid)) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@functools.cache
def _module_of(path: str) -> str:
    """``cts/test_generated`` of a test file's path, clone or installed (once per file: Path of
    every one of 17,900 items took a second)."""
    parts = Path(path)
    return f"{parts.parent.name}/{parts.stem}"


def _load_expected(config):
    """``--expected-failures``, read once per process (a file that cannot be read: one usage line)."""
    path = config.getoption("expected_failures")
    if not path:
        return None
    from nnts.formats import expected_failures, files
    try:
        return expected_failures.load(path)
    except files.UsageError as e:
        raise pytest.UsageError(str(e)) from None


def _check_options(config) -> None:
    """Options that name files or numbers: one usage line before collection, not a traceback."""
    from nnts.formats import files
    try:
        files.input_file("--expected-failures", config.getoption("expected_failures"))
        files.positive("--call-timeout", config.getoption("call_timeout"))
        for path in config.getoption("report"):  # its folder is created
            if not path or os.path.isdir(path):
                raise files.UsageError(f"--report {path!r}: a folder or an empty path, not a file")
            files.writable("--report", path)
        files.positive("--random-graphs", config.getoption("random_graphs"), allow_zero=True)
        files.positive("--random-ops", config.getoption("random_ops"), allow_zero=True)
        files.positive("--random-chains", config.getoption("random_chains"), allow_zero=True)
    except files.UsageError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.fixture(scope="session")
def driver_spec(pytestconfig) -> str:
    return pytestconfig.getoption("driver")


@pytest.fixture
def crash_reproducer(request) -> Path | None:
    """Where a random test saves its model before an in-process driver runs it, the reproducer of
    a crash that ends the process (None for a driver in a process of its own: the test reports
    its crash and saves the reproducer itself)."""
    return _crash_reproducer(request.node)


def _crash_reproducer(item) -> Path | None:
    params = item.callspec.params if hasattr(item, "callspec") else {}
    seed = next((params[k] for k in ("seed", "operation_seed", "across_seed") if k in params), None)
    if seed is None or not _in_process(item.config):
        return None
    kind = getattr(item, "originalname", item.name).removeprefix("test_")
    return Path(item.config.getoption("reproducers")) / f"crashed_{kind}_seed{int(seed)}.json"


def _in_process(config) -> bool:
    """Whether a driver under test runs in this process (where its crash ends the process); the
    reference is taken not to crash."""
    specs = [s.strip() for s in config.getoption("driver").split(",") if s.strip()]
    return not config.getoption("isolate") and any(
        s != "reference" and not s.startswith(("remote:", "socket:")) for s in specs)


@pytest.fixture(scope="session")
def drivers(pytestconfig):
    """The HAL drivers under test, loaded once per (worker) process."""
    return _drivers(pytestconfig)


def _drivers(config):
    if getattr(config, "nnts_drivers", None) is None:
        from nnts.runners.drivers import load_drivers
        config.nnts_drivers = load_drivers(config.getoption("driver"), isolate=config.getoption("isolate"),
                                           settings=config.nnts_settings, incidents=_incident_log(config))
    return config.nnts_drivers


def _support(config):
    """What the drivers under test support (:mod:`nnts.runners.support`), at their feature level
    or ``--feature-level``: asked when random cases are first collected or run, once per run
    (the xdist workers share it through the user's cache, computed under a lock)."""
    from nnts.runners.support import learn
    drivers = _drivers(config)
    level = min(int(d.get_feature_level()) for d in drivers)
    if config.getoption("feature_level") is not None:
        level = min(level, config.getoption("feature_level"))
    return learn(drivers, level, config.nnts_settings.cache_dir)


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
def chain_type(devices):
    """The data type the execution-sequence and over-time tests build their models in, chosen once
    per run from what the devices support: float32, else quant8 (nnts.generators.builders.chain_type)."""
    from nnts.generators.builders import chain_type as choose
    return choose(devices)


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
            if hasattr(report, "wasxfail"):  # a crash or a hang is never an expected failure
                del report.wasxfail
            item.nnts_incidents += len(new)
    if report.when == "call" or not report.passed:
        report.user_properties += _test_properties(item)  # item.user_properties too: JUnit's properties
    elif report.when == "setup":  # for the xdist controller, should the worker die in the call (pytest_handlecrashitem)
        report.user_properties = [*report.user_properties, *_test_properties(item), ("nnts_replay", _replay(item))]
    if report.when == "setup":  # before the test drives the driver: a driver it crashes is not asked
        _describe_run_once(item, report)
    running = getattr(item.config, "nnts_running", None)
    if running is not None:  # one process: the test a crash would end the run in (nnts test tells it)
        from nnts.formats.expected_failures import suite_id
        text = f"{suite_id(str(item.path), item.nodeid)}\n{_replay(item)}".encode() if report.when == "setup" else b""
        os.pwrite(running, text, 0)
        os.ftruncate(running, len(text))


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
    properties.append(("nnts_module", _module_of(str(item.fspath))))
    return properties


def _replay(item) -> str:
    """How to run ``item`` again by itself, in one process (where a debugger stops in the driver):
    a generated test's model from its file, a random test's from the file it saves before an
    in-process driver runs it, any other test by its id."""
    import re
    import shlex

    driver = shlex.quote(item.config.getoption("driver"))
    crash_file = _crash_reproducer(item)
    if crash_file is not None:  # (the crash handler drops these lines when the driver did not get the model)
        return (f"reproducer: {crash_file}{BEFORE_THE_DRIVER}\nreplay: nnts vectors run "
                f"{shlex.quote(str(crash_file))} --driver {driver} --inline\n" + _replay_by_id(item, driver))
    case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
    path = getattr(case, "path", None) or getattr(getattr(case, "base", None), "path", None)
    if path is not None and hasattr(case, "test"):
        return (f"reproducer: {path} (test model {case.test.name})\nreplay: nnts vectors run {shlex.quote(str(path))} "
                f"--filter {shlex.quote('^' + re.escape(case.test.name) + '$')} --driver {driver} --inline")
    return _replay_by_id(item, driver)


def _replay_by_id(item, driver: str) -> str:
    import shlex

    from nnts.formats.expected_failures import suite_id
    config = item.config
    options = "".join(f" --{name.replace('_', '-')} {config.getoption(name)}" for name, default in _CASE_OPTIONS
                      if config.getoption(name) != default)
    return f"replay: nnts test {shlex.quote(suite_id(str(item.path), item.nodeid))} --driver {driver}{options}"


# The options that decide which cases a parametrized test has, with their defaults.
_CASE_OPTIONS = (("random_seed", 0), ("random_ops", 200), ("random_graphs", 200), ("random_chains", 100),
                 ("feature_level", None))
_TEST_PROPERTIES = ("nnts_op", "nnts_dtype", "nnts_section", "nnts_variant", "nnts_module")
_running: dict[str, list[tuple]] = {}  # xdist controller: the properties of each test set up and not torn down


_replays: dict[str, str] = {}  # xdist controller: the replay line of each test set up and not torn down


def pytest_runtest_logreport(report):
    if report.when == "setup" and report.passed:
        _running[report.nodeid] = [(k, v) for k, v in report.user_properties if k in _TEST_PROPERTIES]
        _replays[report.nodeid] = dict(report.user_properties).get("nnts_replay", "")
    elif report.when == "teardown":
        _running.pop(report.nodeid, None)
        _replays.pop(report.nodeid, None)


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
    if item.config.nnts_support.cache_info().currsize:  # learned in this process: the report's support facts
        facts["support"] = item.config.nnts_support().table()
    report.user_properties = [*report.user_properties, ("nnts_run", json.dumps(facts))]  # this report's only


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, starting a worker: where the worker's faulthandler writes the
    stack it dies with (read back by ``pytest_handlecrashitem``)."""
    config = node.config
    if not hasattr(config, "nnts_crash_logs"):
        config.nnts_crash_logs = tempfile.mkdtemp(prefix="nnts-crash-logs-")
        config.add_cleanup(functools.partial(_remove_crash_logs, config.nnts_crash_logs))
    node.workerinput["nnts_crash_log"] = os.path.join(config.nnts_crash_logs, f"{node.gateway.id}.txt")


def _remove_crash_logs(folder: str) -> None:
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionstart(session):
    """An xdist worker: faulthandler's dump of a crash to the file the controller reads (after pytest's
    own faulthandler set-up, which sends it to the console, where no report has it), and the tests'
    standard error (an in-process driver's own lines) captured into a file the controller reads
    too. One process (``nnts test``, an in-process driver): the standard error and the running
    test in the folder ``nnts test`` reads should pytest die."""
    config = session.config
    path = getattr(config, "workerinput", {}).get("nnts_crash_log")
    if path:
        _dump_crash_stack_to(config, path)
        _capture_stderr_in(config, _stderr_log(path))
        return
    folder = config.getoption("nnts_crash_folder")
    if folder and getattr(config.option, "dist", "no") == "no" and _in_process(config):
        _dump_crash_stack_to(config, os.path.join(folder, "faulthandler.txt"))  # nnts test prints it
        _capture_stderr_in(config, os.path.join(folder, "stderr.txt"))
        config.nnts_running = _private_file(os.path.join(folder, "running.txt"))
        gathered = config.pluginmanager.get_plugin("nnts-results")
        if gathered is not None and (config.getoption("report") or getattr(config.option, "xmlpath", None)):
            gathered.start_journal(config, os.path.join(folder, "results.jsonl"))


def _private_file(path: str, access: int = os.O_WRONLY) -> int:
    """A file of the run's private folder, made (or emptied) for this process, never through a link."""
    return os.open(path, access | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)


def _dump_crash_stack_to(config, path: str) -> None:
    """faulthandler's dump of a crash to ``path`` (open until the process ends), where the process
    that outlives this one reads it."""
    import faulthandler
    config.nnts_crash_log = os.fdopen(_private_file(path), "w", encoding="utf-8")
    faulthandler.enable(file=config.nnts_crash_log, all_threads=False)


def _stderr_log(crash_log: str) -> str:
    return crash_log.removesuffix(".txt") + "-stderr.txt"


def _capture_stderr_in(config, path: str) -> None:
    """pytest's capture of file descriptor 2 into the file at ``path`` instead of an anonymous
    temporary file: what a test wrote to the standard error outlives the process (pytest reads and
    empties it after each phase of a test, as before). Nothing with another capture method (``-s``:
    the lines go to the console)."""
    capture = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    err = getattr(capture, "err", None)
    tmpfile = getattr(err, "tmpfile", None)
    if getattr(err, "targetfd", None) != 2 or not hasattr(tmpfile, "fileno"):
        return
    fd = _private_file(path, os.O_RDWR)
    os.dup2(fd, tmpfile.fileno())
    os.close(fd)
    if getattr(err, "_state", None) == "started":  # fd 2 is the old file's: point it at the new one
        os.dup2(tmpfile.fileno(), 2)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """pytest-xdist: a worker died in a test (an in-process driver crashed, without --isolate).
    The test's verdict is CRASH, as under --isolate, with the stack the worker died with and how
    to replay the test; ``-x`` (``--maxfail``) counts it, else xdist starts a new worker and goes on."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    name = getattr(worker, "id", "?")
    config = getattr(report.node, "config", None)
    folder = getattr(config, "nnts_crash_logs", None)
    last = faulthandler_stack(os.path.join(folder, f"{name}.txt")) if folder else ""
    stderr = last_lines(_stderr_log(os.path.join(folder, f"{name}.txt"))) if folder else ""
    replay = replay_lines(_replays.pop(crashitem, ""))
    report.longrepr = (f"CRASH: the pytest-xdist worker {name} died while running this test (an in-process "
                       "driver that crashes takes its worker with it; --isolate runs the driver in a process "
                       "of its own and reports its exit status)"
                       + (f"\nthe driver's last stderr lines (in this test):\n{stderr}" if stderr else "")
                       + (f"\nthe worker's last words (faulthandler):\n{last}" if last else "")
                       + (f"\n{replay}" if replay else ""))
    report.user_properties.append(("nnts_verdict", "crashed"))
    report.user_properties += _running.pop(crashitem, [])  # its operation and type, as its setup report gave them
    dsession = config.pluginmanager.get_plugin("dsession") if config is not None else None
    if hasattr(dsession, "_handlefailures"):  # as a failure a worker reports: -x stops here
        dsession._handlefailures(report)


def _summarize_stale(terminalreporter, config) -> None:
    stale = getattr(config, "nnts_stale", None)
    if stale:
        from nnts.formats.expected_failures import Entry, stale_lines
        terminalreporter.section("nnts: expected failures that match no test of this run (stale: remove or fix them)")
        for line in stale_lines(config.getoption("expected_failures"), [Entry(p, r, n) for n, p, r in stale]):
            terminalreporter.write_line(line)


class ConformanceResults:
    """Every test's result (nnts.reports.results.records_of_report), gathered from test reports (on the
    xdist controller too, which receives every worker's reports)."""

    def __init__(self):
        self.started = datetime.datetime.now()
        self.tests: list[dict] = []
        self.run_facts: dict = {"drivers": [], "corpora": [], "support": []}

    def pytest_runtest_logreport(self, report):
        from nnts.reports.results import records_of_report, unique_facts
        props = dict(report.user_properties)
        if "nnts_run" in props:
            facts = json.loads(props["nnts_run"])
            for key in ("drivers", "corpora"):
                self.run_facts[key] = unique_facts(key, self.run_facts[key] + facts[key])
            self.run_facts["support"] = self.run_facts["support"] or facts.get("support", [])
        records = records_of_report(report, props)
        self.tests += records
        if self.journal is not None:
            self._log(report, props, records)

    # One process under ``nnts test``: what the report needs, a line as each test ends, so that
    # ``nnts test`` writes the report of what ran should a driver crash the process.
    journal = None
    config = None

    def start_journal(self, config, path: str) -> None:
        from nnts.reports.results import run_meta
        self.journal, self.config = os.fdopen(_private_file(path), "w", encoding="utf-8"), config
        config.add_cleanup(self.journal.close)
        baseline = config.getoption("baseline")
        self._write({"settings": {"reports": [os.path.abspath(p) for p in config.getoption("report")],
                                  "baseline": os.path.abspath(baseline) if baseline else None,
                                  "junitxml": os.path.abspath(xml) if (xml := getattr(config.option, "xmlpath", None))
                                  else None,
                                  "meta": run_meta(config, self.started, [], [])}})

    def _log(self, report, props: dict, records: list[dict]) -> None:
        from nnts.reports.conformance import vet
        from nnts.reports.results import pytest_replay
        config = self.config
        if "nnts_run" in props:
            self._write({"facts": self.run_facts})
        if report.when == "setup" and report.passed:
            self._write({"running": {"test": report.nodeid, "replay": pytest_replay(config, report.nodeid),
                                     "props": {k: v for k, v in props.items() if k in _TEST_PROPERTIES}}})
        if records:
            copies = [dict(r) for r in records]  # as write_reports will make them
            vet(config, copies)
            self._write({"tests": copies})

    def _write(self, entry: dict) -> None:
        self.journal.write(json.dumps(entry) + "\n")
        self.journal.flush()  # in the system's hands: a crash of this process loses none of it


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _summarize_stale(terminalreporter, config)
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
