"""Breadth-first test order and the quick tier (``--order``, ``--quick``).

In collection order a conformance run goes operation by operation, CTS before VTS, so a fault
that only VTS, or only the last operation, finds waits behind tens of thousands of passing tests.
Breadth-first order runs one test of every group (test kind, operation, data type, execution
path) before a second test of any: ``-x`` then stops at a driver's first fault wherever it is,
and a partial run (interrupted, ``--maxfail``) is a fair sample. ``--quick`` keeps that first
pass only.
The order is applied last among the collection hooks, after ``-k``/``-m`` deselected their
tests, so that ``--quick -k CONV`` is the first pass of the CONV tests, and only to a run of the
suites' tests (the plugin is loaded in every pytest run where nnts is installed).

The order is computed from the collected items alone (their ids and parameters), so every
pytest-xdist worker computes the same order, as xdist requires. xdist's load scheduler hands
tests to the workers in collection order, one at a time in breadth-first order (see
``OrderPlugin.pytest_configure``), so the first pass is what the workers run first.
"""
from __future__ import annotations

import collections
import gc
from importlib import resources
from pathlib import Path

import pytest
from xdist.scheduler import LoadScheduling

ORDERS = ("breadth", "collection")
# Parameters naming the execution path of a test (CTS uses "mode", VTS "path").
PATH_PARAMS = ("path", "mode")
# Tests a pytest-xdist worker of a breadth-first run holds at most (run or to run), and the number
# below which it is sent more: enough that it never waits for the controller between two tests,
# few enough that a worker told to stop (``-x``) ends within milliseconds.
LOOKAHEAD, REFILL_BELOW = 8, 4


def add_options(group) -> None:
    group.addoption("--order", choices=ORDERS, default="breadth",
                    help="test order: breadth (default: every test kind, operation, data type and "
                         "execution path once before any twice) or collection (file by file)")
    group.addoption("--quick", action="store_true",
                    help="run only the first breadth-first pass: one test of each test kind, "
                         "operation, data type and execution path")


def group_key(item) -> tuple[str, str, str, str]:
    """(test kind, operation, data type, execution path) of a collected test. The kind is the test
    function; operation and data type come from its test-model parameter (``case``,
    ``cache_case``, ...), "-" where it has none; the path from a ``path``/``mode`` parameter
    (a generated test runs all its model's variants: its first pass runs them all)."""
    kind = item.nodeid.split("[", 1)[0]
    params = item.callspec.params if hasattr(item, "callspec") else {}
    operation = dtype = path = "-"
    for value in params.values():
        operation, dtype = _subject(value) or (operation, dtype)
    for name in PATH_PARAMS:
        if name in params:
            path = str(params[name])
    return kind, operation, dtype, path


def _subject(value) -> tuple[str, str] | None:
    """(operation, data type) of a test-model parameter; None for other parameters."""
    if hasattr(value, "operation") and hasattr(value, "dtype"):
        return str(value.operation), str(value.dtype)
    return None


def first_pass_params(metafunc, params: list) -> list:
    """``params`` of a test function parametrized by one test-model parameter, cut to those of
    the first breadth-first pass (the first of each operation and data type) when ``--quick``
    is all that selects tests: the other tests are then neither built nor collected (about 16,000
    items of the suite's 17,900, a second in every xdist worker). The pass is the one ``reorder``
    would keep, as each parameter is one test and the groups keep their order. With ``-k``,
    ``-m``, ``--shard``, ``--deselect``, ``--lf`` or test ids, every test is collected and
    ``reorder`` picks the first pass of what they select."""
    if not _quick_alone(metafunc.config):
        return params
    seen, kept = set(), []
    for param in params:
        key = _subject(param.values[0])
        if key not in seen:
            seen.add(key)
            kept.append(param)
    return kept


def _quick_alone(config) -> bool:
    option = config.option
    return bool(getattr(option, "quick", False) and not getattr(option, "keyword", "")
                and not getattr(option, "markexpr", "") and not getattr(option, "shard", None)
                and not getattr(option, "deselect", None) and not getattr(option, "lf", False)
                and not any("::" in arg for arg in config.args))


def breadth_first(items: list) -> list[tuple[int, object]]:
    """(pass, item) in breadth-first order: pass n holds the n-th test of every group. Within a
    pass the test kinds take turns (one group of each kind, then the next of each), so CTS and
    VTS kinds start together; ties keep collection order."""
    kinds: dict[str, int] = {}
    groups_of_kind: dict[str, int] = collections.Counter()
    group_index: dict[tuple, int] = {}
    seen: dict[tuple, int] = collections.Counter()
    ranked = []
    for position, item in enumerate(items):
        key = group_key(item)
        kind = key[0]
        kinds.setdefault(kind, len(kinds))
        if key not in group_index:
            group_index[key] = groups_of_kind[kind]
            groups_of_kind[kind] += 1
        rank = seen[key]
        seen[key] += 1
        ranked.append(((rank, group_index[key], kinds[kind], position), item))
    ranked.sort(key=lambda pair: pair[0])
    return [(sort_key[0], item) for sort_key, item in ranked]


def only_suite_tests(items: list) -> bool:
    """Whether every item is a test of nnts's conformance suites (CTS, VTS)."""
    suites = {str(resources.files(package)) for package in ("nnts.cts", "nnts.vts")}
    paths = {str(item.path) for item in items}  # a few files: Path() of 48k items took a second
    return bool(items) and {str(Path(path).parent) for path in paths} <= suites


def reorder(config, items: list) -> None:
    """Put ``items`` in the order ``--order`` asks for; with ``--quick``, deselect all but the
    first breadth-first pass."""
    quick = config.getoption("quick", False)
    if config.getoption("order", "collection") == "collection" and not quick:
        return
    ordered = breadth_first(items)
    if quick:
        dropped = [item for n, item in ordered if n > 0]
        ordered = [(n, item) for n, item in ordered if n == 0]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
    if config.getoption("order", "breadth") == "collection":  # --quick --order collection
        chosen = {id(item) for _, item in ordered}
        items[:] = [item for item in items if id(item) in chosen]
    else:
        items[:] = [item for _, item in ordered]


class OrderPlugin:
    """The plugin applying ``reorder`` (registered by ``nnts.plugin``)."""

    def pytest_configure(self, config):
        """Under xdist's load scheduling of a breadth-first run, hand tests out a few at a time
        (``LookaheadScheduling``) unless ``--maxschedchunk`` says otherwise: by default each
        worker is first sent a contiguous eighth of the run, so the second worker starts deep in
        the order, and, as a worker runs every test it was sent before it stops, ``-x`` took
        minutes to end after the first failure."""
        option = config.option
        self.lookahead = (getattr(option, "order", None) == "breadth" and getattr(option, "dist", "no") == "load"
                          and hasattr(option, "maxschedchunk") and option.maxschedchunk is None)
        if self.lookahead:
            option.maxschedchunk = LOOKAHEAD

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if getattr(self, "lookahead", False):
            return lookahead_scheduling(config, log)
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if only_suite_tests(items):  # the plugin is in every pytest run: other suites keep their order
            reorder(config, items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self, session):
        """Collection leaves about a million objects alive for the whole run (the test models of
        every case, the items). The garbage collector is off while they are made (its passes
        over the growing heap were a quarter of the collection's time, finding almost nothing),
        runs once after, and then they are moved out of its sight (``gc.freeze``), so that they
        are not scanned again by every full collection (the automatic ones, and each
        ``gc.collect()`` of a test that checks a released object, which took over a second each)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.collect()
                gc.enable()
            gc.freeze()


def lookahead_scheduling(config, log):
    """xdist's load scheduling, keeping every worker between ``REFILL_BELOW`` and ``LOOKAHEAD``
    tests ahead. Sent one at a time (``--maxschedchunk 1``), a worker that finished a test
    waited for the controller to send the next one (xdist runs a test once it knows the one
    after it), and every test cost the controller a message."""

    class LookaheadScheduling(LoadScheduling):
        def check_schedule(self, node, duration: float = 0) -> None:
            if node.shutting_down:
                return
            if not self.pending:
                node.shutdown()
                return
            held = len(self.node2pending[node])
            if held < REFILL_BELOW:
                self._send_tests(node, LOOKAHEAD - held)

    return LookaheadScheduling(config, log)
