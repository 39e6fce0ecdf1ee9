"""The nnts pytest plugin: ``pytest cts vts --driver=...``.

Options: ``--driver`` (``reference`` or ``module.path:factory``, comma-separated for several),
``--vectors PATH`` (extra test-vector files or folders; ``../shared/vectors`` when present),
``--feature-level N`` (test only what that level requires), ``--expected-failures FILE`` (known
driver issues: xfail, warned about when they pass), ``--report PATH`` (HTML conformance report),
``--reproducers DIR`` (where failing models are saved).

Generated tests carry the markers ``op_<OPERATION>`` and ``dtype_<OPERAND TYPE>``, so
``-m op_CONV_2D`` or ``-k "CONV_2D and QUANT8"`` select them. Under pytest-xdist every worker
collects the same tests in the same order and loads its drivers once.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from nnapi_ref.types import OperandCode, OperationCode

ROOT = Path(__file__).parent
SHARED_VECTORS = ROOT.parent / "shared" / "vectors"


def pytest_addoption(parser):
    group = parser.getgroup("nnts", "NNAPI driver conformance")
    group.addoption("--driver", default=os.environ.get("NNTS_DRIVER", "reference"),
                    help="driver(s) under test: reference, or module.path:factory (comma-separated)")
    group.addoption("--vectors", action="append", default=[],
                    help="extra test-vector files or folders (default: ../shared/vectors when present)")
    group.addoption("--no-shared-vectors", action="store_true", help="do not add ../shared/vectors")
    group.addoption("--feature-level", type=int, default=None, help="test only what this feature level requires")
    group.addoption("--expected-failures", default=None, help="file of test ids expected to fail (xfail)")
    group.addoption("--report", default=None, help="write an HTML conformance report to this path")
    group.addoption("--reproducers", default="out/reproducers", help="folder for failing models")


def pytest_configure(config):
    for code in OperationCode:
        config.addinivalue_line("markers", f"op_{code.name}: tests of the {code.name} operation")
    for name in dict.fromkeys(c.name for c in OperandCode):
        config.addinivalue_line("markers", f"dtype_{name}: tests with {name} operands")
    config.addinivalue_line("markers", "vts: driver-level tests (straight against the driver interface)")
    config.pluginmanager.register(ConformanceResults(), "nnts-results")


def pytest_collection_modifyitems(config, items):
    vts = ROOT / "vts"
    for item in items:
        if vts in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vts)


@pytest.fixture(scope="session")
def driver_spec(pytestconfig) -> str:
    return pytestconfig.getoption("driver")


@pytest.fixture(scope="session")
def drivers(driver_spec):
    """The HAL drivers under test, loaded once per (worker) process."""
    from nnapi_ref.drivers import load_drivers
    return load_drivers(driver_spec)


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


def vector_paths(config) -> list[Path]:
    paths = [Path(p) for p in config.getoption("vectors")]
    if not config.getoption("no_shared_vectors") and SHARED_VECTORS.is_dir():
        paths.append(SHARED_VECTORS)
    return paths


def load_expected_failures(config) -> dict[str, str]:
    path = config.getoption("expected_failures")
    if not path:
        return {}
    from nnapi_ref.cli import load_known_failures
    return load_known_failures(path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and report.skipped):
        case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
        op = getattr(item, "nnts_op", getattr(case, "operation", None))
        dtype = getattr(item, "nnts_dtype", getattr(case, "dtype", None))
        if op is not None:
            report.user_properties += [("nnts_op", op), ("nnts_dtype", dtype or "-")]


class ConformanceResults:
    """Outcomes per operation and data type, gathered from test reports (on the xdist
    controller too, which receives every worker's reports)."""

    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []  # (operation, data type, outcome, test id)

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        if "nnts_op" not in props or not (report.when == "call" or (report.when == "setup" and report.skipped)):
            return
        if report.passed:
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
    xpassed = [nodeid for _, _, outcome, nodeid in results if outcome == "xpass"]
    if xpassed:
        terminalreporter.section("nnts: expected failures that now pass (remove them from the list)")
        for nodeid in xpassed:
            terminalreporter.write_line(nodeid)
    path = config.getoption("report")
    if path:
        from reports.conformance import write_report
        write_report(path, results, config.getoption("driver"))
        terminalreporter.write_line(f"nnts: conformance report written to {path}")
