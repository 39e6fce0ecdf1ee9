"""Random graphs across devices: for a partial driver, each case is a random graph of the
operations it supports and as many it does not (picked by the seed; :mod:`nnts.runners.support`),
at the sizes of ``cts/test_random_graph.py``. The runtime partitions it with CPU fallback: the
driver runs its steps, the CPU the rest, operands crossing between them at every boundary. The
outputs are compared with the reference's by the random-graph criteria; a plan where the driver's
part fell back to the CPU (it failed to prepare a step) fails. A failure is shrunk (keeping the
graph across devices) and saved with its replay command. A case whose graph does not mix (the
driver supports all or none of its operations) is skipped, and so is every case of a complete
driver, which has nothing to partition.

``--random-partitioned N`` cases (default 50) from ``--random-seed S`` (ids ``seed<S>``);
counted apart in the report ("random graphs across devices").
"""
from __future__ import annotations

import pytest

from nnts.runners.differential import run_case


def pytest_generate_tests(metafunc):
    if "across_seed" in metafunc.fixturenames:
        base, n = metafunc.config.getoption("random_seed"), metafunc.config.getoption("random_partitioned")
        metafunc.parametrize("across_seed", range(base, base + n), ids=[f"seed{s}" for s in range(base, base + n)])


def test_random_graph_across_devices(across_seed, devices, reference_devices, request, driver_spec,
                                     crash_reproducer):
    support = request.config.nnts_support()
    if support.complete:
        pytest.skip("the driver supports every operation: nothing to partition across devices")
    result = run_case(across_seed, devices, reference_devices, support.level, request.config.getoption("reproducers"),
                      driver_spec, support=support, across=True, crash_file=crash_reproducer)
    if result.status == "skip":
        pytest.skip(result.message)
    if result.status != "pass":
        pytest.fail("across devices: " + result.message, pytrace=False)
