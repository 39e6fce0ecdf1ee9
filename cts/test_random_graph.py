"""Random-graph differential tests (AOSP's RandomGraphTest): each case generates one valid random
model from its seed (:mod:`nnts.generators.graphs`; 1-5 operations for even seeds, 6-40 for odd ones), runs
it through the runtime API on the driver under test and on the in-process reference driver, and
compares the outputs with RandomGraphTest's criteria for random graphs:

* small graphs (<= 5 operations): float32 |diff| <= 1e-2 + 1e-2 |expected|, bias <= 4e-4,
  MSE <= 1e-5; float16 |diff| <= 1 + |expected|, bias <= 5e-2, MSE <= 1e-2;
* large graphs (> 5 operations): float32 |diff| <= 0.1 + 0.1 |expected|, bias <= 1e-2,
  MSE <= 1e-4; float16 as small graphs but bias <= 0.1, MSE <= 5e-2;
* either size: int32 |diff| <= 1; quant8 |diff| <= 12 steps, bias <= 2, MSE <= 2 (steps);
  bool8 at most ceil(10%) of the elements differing; relaxed float32 judged as float16.

Bias and MSE are taken over outputs of at least 10 compared elements, float differences divided
by max(1, |expected|); expected values that are not finite, float32 beyond 1e3 and float16
beyond 1e2 are not compared (details in :mod:`nnts.runners.differential`).

For a partial driver the graphs are drawn from what it supports (:mod:`nnts.runners.support`, asked
once per run and cached by the driver's identity): its operations, the data types they start from
and their signatures, at the same sizes, so they run on it; seed and support name the case, and the
reproducer records the support.

``--random-graphs N`` cases from seed ``--random-seed S`` (ids ``seed<S>``; rerun one with
``-k seed<S>``); the breadth-first order groups them by graph size (one case of each size, then a
second of each). A failing case is shrunk one step at a time while it still fails (an operation
or an output removed, then a dimension of the model inputs cut) and saved under ``--reproducers``
as a test-vector file with the reference's outputs as expected values and the driver's beside
them; the message names the remaining operations and their input shapes, and gives the replay
command. Shrinking keeps the failure: a step counts only if the smaller model fails the same way
(:func:`nnts.runners.differential.same_failure`).

On ``onnxruntime``, ``tflite`` and ``tflite-ref`` a failure that a documented class of
``docs/conformance/`` explains (:mod:`nnts.runners.known_classes`, decided from the failing model and its
values) is an expected failure naming the class; any other fails with "not explained by a
documented class".
"""
from __future__ import annotations

import pytest

from nnts.generators.random_graphs import case_size
from nnts.runners.differential import run_case


class GraphSeed(int):
    """A case's seed that names the size of its graph, so that the breadth-first order
    (:mod:`nnts.runners.ordering`, which groups tests by their parameter's ``operation`` and ``dtype``)
    runs one graph of every size before a second of any: the 200 cases are 40 groups, and a graph
    that finds a fault runs within the first few passes, not in the 200th."""

    dtype = "-"  # drawn with the case, not known at collection

    @property
    def operation(self) -> str:
        return f"graph of {case_size(self)}"


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        base, n = metafunc.config.getoption("random_seed"), metafunc.config.getoption("random_graphs")
        metafunc.parametrize("seed", [GraphSeed(s) for s in range(base, base + n)],
                             ids=[f"seed{s}" for s in range(base, base + n)])


def test_random_graph(seed, devices, reference_devices, request, driver_spec):
    support = request.config.nnts_support()
    result = run_case(seed, devices, reference_devices, support.level, request.config.getoption("reproducers"),
                      driver_spec, support=support)
    if result.status == "skip":
        pytest.skip(result.message)
    if result.status != "pass" and result.explained:
        pytest.xfail(f"{result.explained}: {result.message}")
    if result.status != "pass":
        pytest.fail(result.message, pytrace=False)
