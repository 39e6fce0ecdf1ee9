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
second of each).

Rounding chains (``test_random_chain``, ``--random-chains N`` from ``--random-seed``, ids
``<OPERATION>-<type>-seed<S>``): graphs of two operations, a quantized operation of what the driver
supports and a SUB of a near copy of its result, which magnifies a one-step difference about six
times (:mod:`nnts.generators.chains`): a rounding that goes the wrong way on many elements
(truncating where NNAPI rounds), within every per-operation tolerance, fails the random-graph
bias and MSE criteria there. Judged, shrunk and saved as the random graphs are.

A failing case is shrunk one step at a time while it still fails (an operation or an output
removed, then a dimension of the model inputs cut) and saved under ``--reproducers`` as a
test-vector file with the reference's outputs as expected values and the driver's beside them; the message names the remaining operations and their input shapes, and gives the replay
command. Shrinking keeps the failure: a step counts only if the smaller model fails the same way
(:func:`nnts.runners.differential.same_failure`). With an in-process driver the model is saved
before the driver runs it (``crashed_random_graph_seed<S>.json``, removed once it returns): a driver
that ends the process leaves its reproducer.

On ``onnxruntime``, ``tflite`` and ``tflite-ref`` a failure that a documented class of
``docs/conformance/`` explains (:mod:`nnts.runners.known_classes`, decided from the failing model and its
values) is an expected failure naming the class; any other fails with "not explained by a
documented class".
"""
from __future__ import annotations

import pytest

from nnapi_ref.types import type_name
from nnts.cts.support import conclude
from nnts.generators import chains
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


class ChainSeed(int):
    """A rounding chain's seed, naming the operation and quantized type it tests (the breadth-first
    order's groups: one chain of each before a second of any)."""

    support = None  # the driver's (nnts.runners.support): the chains are of what it supports
    pair = None  # (operation, quantized type): chains.case_pair of the seed and support

    @property
    def operation(self) -> str:
        return self.pair[0].name if self.pair else "-"

    @property
    def dtype(self) -> str:
        return type_name(self.pair[1]) if self.pair else "-"


def pytest_generate_tests(metafunc):
    base = metafunc.config.getoption("random_seed")
    if "seed" in metafunc.fixturenames:
        n = metafunc.config.getoption("random_graphs")
        metafunc.parametrize("seed", [GraphSeed(s) for s in range(base, base + n)],
                             ids=[f"seed{s}" for s in range(base, base + n)])
    if "chain_seed" in metafunc.fixturenames:
        support = metafunc.config.nnts_support()
        pairs = chains.case_pairs(support)
        seeds = []
        for s in range(base, base + metafunc.config.getoption("random_chains")):
            seeds.append(ChainSeed(s))
            seeds[-1].support, seeds[-1].pair = support, pairs[s % len(pairs)] if pairs else None
        metafunc.parametrize("chain_seed", seeds, ids=[f"{s.operation}-{s.dtype}-seed{s}" for s in seeds])


def test_random_graph(seed, devices, reference_devices, request, driver_spec, crash_reproducer):
    support = request.config.nnts_support()
    result = run_case(seed, devices, reference_devices, support.level, request.config.getoption("reproducers"),
                      driver_spec, support=support, crash_file=crash_reproducer)
    conclude(result)


def test_random_chain(chain_seed, devices, reference_devices, request, driver_spec):
    """A rounding chain (:mod:`nnts.generators.chains`): a quantized operation, then a SUB of a near
    copy of its result, which magnifies a one-step rounding difference about six times, judged
    by the random-graph criteria."""
    support = chain_seed.support
    graph, code = chains.generate_case(chain_seed, support.level, support, chain_seed.pair)
    if code is not None:
        request.node.nnts_op, request.node.nnts_dtype = code.name, chain_seed.dtype
    if len(graph.operations) < 2:
        pytest.skip(f"unsupported: no rounding chain for {chain_seed.operation} on {chain_seed.dtype} "
                    f"(no form of it at feature level {support.level}, or neither SUB nor ADD on its result "
                    f"supported)")
    result = run_case(graph.seed, devices, reference_devices, support.level, request.config.getoption("reproducers"),
                      driver_spec, graph=graph, support=support)
    conclude(result, f"rounding chain seed {int(chain_seed)} ({chain_seed.operation} on {chain_seed.dtype}): "
                     f"{result.message}")
