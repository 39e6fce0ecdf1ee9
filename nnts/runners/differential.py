"""Differential testing of random models: run one on the driver under test and on the reference
driver through the runtime API, compare with the accuracy criteria of AOSP's RandomGraphTest, and
shrink a failing model to the fewest operations that still fail the same way.

Criteria (AOSP ``TestRandomGraph.cpp`` ``kSmallGraphCriteria`` / ``kLargeGraphCriteria``, checked
as its ``TestHarness.cpp`` ``expectNear`` does): every element within ``atol + rtol * |expected|``;
over the compared elements of an output of at least 10 of them, the mean difference (bias) and
mean squared difference (MSE) within limits, differences of floats divided by max(1, |expected|).

====================  =====================  =====================  =================
output type           small graph (<= 5 ops)  large graph (> 5 ops)  bias / MSE
====================  =====================  =====================  =================
TENSOR_FLOAT32        atol 1e-2, rtol 1e-2   atol 1e-1, rtol 1e-1   small 4e-4 / 1e-5,
                                                                    large 1e-2 / 1e-4
TENSOR_FLOAT16        atol 1, rtol 1         atol 1, rtol 1         small 5e-2 / 1e-2,
                                                                    large 1e-1 / 5e-2
TENSOR_INT32          atol 1                 atol 1                 none
TENSOR_QUANT8_*       atol 12                atol 12                2 / 2 (in steps)
TENSOR_BOOL8          at most ceil(10%) of the elements differ
====================  =====================  =====================  =================

Float32 outputs of a relaxed model are judged as float16. Expected values that are not finite,
float32 beyond 1e3 or float16 beyond 1e2 are skipped (what AOSP means to skip; its code skips
every float16 element and every element beyond 1e2 by an operator-precedence slip). Besides the
values, each output's shape must match, and the driver must compile and execute the model: a
failure to is a failure (an operation it reports unsupported is a skip). The reference failing on
a generated model (an error code or an exception) is a reference bug: reported as such, with a
``reference_bug_*`` reproducer, before the driver under test is run.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from nnapi_ref import ops, vectors
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Compilation, Device
from nnapi_ref.types import OperandCode as T, type_name
from nnts.generators import single
from nnts.generators.criteria import compare_output, criteria_for, criteria_json
from nnts.generators.graphs import I32, Graph, dimension_cuts, with_dimension_cut, without_operation, without_output
from nnts.generators.random_graphs import case_size, generate
from nnts.runners.graph import picture_beside
from nnts.runners.known_classes import classes_for, explain
from nnts.runners.model_runner import build_model, execute
from nnts.runners.parameters import describe_model, unsupported_operations


def run(devices: Sequence[Device], test: vectors.TestModel) -> list[np.ndarray]:
    """The outputs of ``test`` compiled for ``devices`` (no CPU fallback), shaped as the driver
    reported; raises NnapiError."""
    compilation = Compilation(build_model(test.model), list(devices))
    compilation.finish()
    outputs, dims = execute(compilation, test)
    return [o[:int(np.prod(d, dtype=np.int64))].reshape(d) for o, d in zip(outputs, dims)]


@dataclass(frozen=True)
class Failure:
    """How a model fails, what shrinking must keep: the ``kind`` (``mismatch``, ``result code``,
    ``crash``, ``hang``, or ``reference``: the reference itself failed), for a mismatch ``where``
    (the operation producing the first mismatching output) and ``detail`` (``values`` or
    ``shape``), for the others the error text (numbers as ``#``, since operand and node indexes
    change as the model shrinks)."""

    kind: str
    where: str = ""
    detail: str = ""

    def __str__(self) -> str:
        if self.kind == "mismatch":
            return f"{self.detail} mismatch in an output of {self.where}"
        return f"{self.kind}: {self.detail}"


def error_failure(message: str, reference: bool = False) -> Failure:
    """The failure of an execution or compilation that ended with ``message``."""
    detail = re.sub(r"\d+", "#", message)
    if reference:
        return Failure("reference", "", detail)
    if "CRASH:" in message or "HANG:" in message:  # the kind is what counts (stderr lines vary)
        return Failure("crash" if "CRASH:" in message else "hang")
    return Failure("result code", "", detail)


@dataclass
class Outcome:
    status: str  # pass, fail, skip
    message: str = ""
    expected: list[np.ndarray] = field(default_factory=list)
    actual: list[np.ndarray] = field(default_factory=list)
    reference_failed: bool = False
    failure: Failure | None = None
    mismatched: list[int] = field(default_factory=list)  # positions of the outputs that differ


def run_across(devices: Sequence[Device], test: vectors.TestModel) -> tuple[list[np.ndarray] | None, str]:
    """The outputs of ``test`` compiled for the runtime's devices with CPU fallback (the driver's
    part on ``devices``, the rest on the CPU), and the plan's steps; None for the outputs when no
    step stayed on ``devices`` (the driver's part fell back to the CPU)."""
    compilation = Compilation(build_model(test.model))
    compilation.finish()
    names = {d.name for d in devices}
    steps = ", ".join(f"{s.device.name} ({len(s.operations)} operations)" for s in compilation.plan.steps)
    if not any(s.device.name in names for s in compilation.plan.steps):
        return None, steps
    outputs, dims = execute(compilation, test)
    return [o[:int(np.prod(d, dtype=np.int64))].reshape(d) for o, d in zip(outputs, dims)], steps


def check(graph: Graph, devices: Sequence[Device], reference: Sequence[Device],
          criteria: dict | None = None, across: bool = False,
          before_driver: Callable[[list[np.ndarray]], None] | None = None) -> Outcome:
    """Run ``graph`` on ``devices`` and on ``reference``; compare the outputs (by output type,
    with ``criteria``, the graph criteria by default). ``across``: the graph mixes operations
    the driver supports and operations it does not, and runs partitioned (the driver's part on
    it, the rest on the CPU: :func:`run_across`); a graph that does not mix is a skip.
    ``before_driver`` is given the reference's outputs before the driver under test runs."""
    test = graph.to_test(f"random_graph_{graph.seed}")
    level = graph.min_level()
    if all(d.feature_level < level for d in devices):
        return Outcome("skip", f"feature level {level} needed")
    try:
        expected = run(reference, test)
    except Exception as e:  # the generator's promise broken: a bug of the generator or the reference
        what = e.code.name if isinstance(e, NnapiError) else type(e).__name__
        return Outcome("fail", f"reference bug (not a finding against the driver under test): the reference "
                               f"failed on a generated model: {what}: {e}", reference_failed=True,
                       failure=error_failure(f"{what}: {e}", reference=True))
    if before_driver is not None:
        before_driver(expected)
    try:
        supported = build_model(test.model).get_supported_operations_for_devices(list(devices))
        if across:
            if all(supported) or not any(supported):
                return Outcome("skip", "not across devices: the driver supports " +
                               ("all" if all(supported) else "none") + " of its operations", expected)
            actual, steps = run_across(devices, test)
            if actual is None:
                return Outcome("fail", f"the driver's part ran on the CPU (plan: {steps}): it failed to prepare it",
                               expected, failure=Failure("fallback", "", "the driver's part fell back"))
        elif not all(supported):
            return Outcome("skip", f"unsupported: {unsupported_operations(test.model, supported)}", expected)
        else:
            actual = run(devices, test)
    except NnapiError as e:
        return Outcome("fail", f"{e.code.name}: {e}", expected, failure=error_failure(f"{e.code.name}: {e}"))
    table = criteria or criteria_for(graph)
    scalar_as_tensor = {T.INT32: I32}  # RANK's output, judged as int32 tensors are
    problems = [None if k in graph.ignored else
                compare_output(e, a, graph.operands[k].type,
                               table.get(scalar_as_tensor.get(graph.operands[k].type, graph.operands[k].type)),
                               f"output {i}")
                for i, (k, e, a) in enumerate(zip(graph.outputs, expected, actual))]
    mismatched = [i for i, p in enumerate(problems) if p]
    if not mismatched:
        return Outcome("pass", "", expected, actual)
    first = mismatched[0]
    shape = expected[first].shape != actual[first].shape
    failure = Failure("mismatch", producer(graph, graph.outputs[first]), "shape" if shape else "values")
    return Outcome("fail", "; ".join(p for p in problems if p), expected, actual, failure=failure,
                   mismatched=mismatched)


def producer(graph: Graph, k: int) -> str:
    """The name of the operation producing operand ``k`` (a model input: "a model input")."""
    for op, name in zip(graph.operations, graph.operation_names):
        if k in op.outputs:
            return name
    return "a model input"


def shrink(graph: Graph, fails: Callable[[Graph], bool]) -> Graph:
    """The smallest graph reached from ``graph`` one step at a time while ``fails`` holds: a step
    removes one operation (its results fed as model inputs holding the reference's values) or
    one output, or, once none can go, cuts one dimension of the model inputs (to 1, to half, or
    by one; :func:`nnts.generators.graphs.with_dimension_cut`)."""
    progress = True
    while progress:
        progress = False
        candidates = [lambda j=j: without_operation(graph, j) for j in reversed(range(len(graph.operations)))]
        candidates += [lambda i=i: without_output(graph, i) for i in range(len(graph.outputs))]
        candidates += [lambda cut=cut: with_dimension_cut(graph, *cut) for cut in dimension_cuts(graph)]
        for make in candidates:
            smaller = make()
            if smaller is not None and fails(smaller):
                graph, progress = smaller, True
                break
    return graph


def save_reproducer(graph: Graph, outcome: Outcome, folder: str | Path, driver: str,
                    failures: dict | None = None, support=None, criteria: dict | None = None,
                    path: Path | None = None) -> tuple[Path, str]:
    """The failing graph as a one-test vector file (at ``path``, else named after the graph in
    ``folder``): the reference's outputs as the expected values, the driver's beside them
    (``driver_outputs``, which the loader ignores), the ``failures`` record (the original failure
    and the shrunk one, and the class explaining them; also ignored by the loader) and the
    command that replays it. Returns the path and the command."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    kind = "reference_bug" if outcome.reference_failed else "random_graph"
    name = f"{kind}_{graph.seed}_" + "_".join(n.lower() for n in graph.operation_names)
    path = path or folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:150] + ".json")
    replay = f"nnts vectors run {shlex.quote(str(path))} --driver {shlex.quote(driver)}" + (" --dynamic" if graph.has_unknown_outputs() else "")
    model = graph.to_test(name, outcome.expected or None, known_outputs=True)
    model.criteria = criteria_json(criteria or criteria_for(graph))  # the replay judges as the random test did
    test = vectors.test_to_json(model)
    if outcome.actual:
        test["driver_outputs"] = {"driver": driver, "outputs": [vectors.encode_data(a) for a in outcome.actual]}
    test["replay"] = replay
    if failures is not None:
        test["failure"] = failures
    if support is not None:  # what the case was drawn from: the same support and seed draw it again
        test["drawn_under"] = {"support": support.summary(), "level": support.level, "drivers": support.drivers,
                               "operations": [c.name for c in support.operations()],
                               "types": [type_name(t) for t in support.types()]}
    doc = {"format": vectors.FORMAT, "source": f"nnts random graph, seed {graph.seed}", "license": vectors.LICENSE,
           "tests": [test]}
    vectors.write_text_atomic(path, json.dumps(doc))
    return path, replay


def operation_summary(graph: Graph) -> str:
    names = graph.operation_names
    shapes = ", ".join(str(list(graph.values[k].shape)) for k in graph.inputs)
    return f"{len(names)} operation{'s' if len(names) != 1 else ''} ({', '.join(names)}) on inputs {shapes or 'none'}"


@dataclass
class CaseResult:
    status: str  # pass, fail, skip
    message: str
    graph: Graph
    shrunk: Graph | None = None
    reproducer: Path | None = None
    explained: str | None = None  # the documented class explaining the failure (nnts.runners.known_classes)
    failure: Failure | None = None


def run_case(seed: int, devices: Sequence[Device], reference: Sequence[Device], level: int,
             folder: str | Path, driver: str, graph: Graph | None = None, criteria: dict | None = None,
             support=None, across: bool = False, crash_file: Path | None = None, **options) -> CaseResult:
    """Random-graph case ``seed``: generate (unless given ``graph``), compare (with ``criteria``,
    the graph criteria by default); on a failure, the documented class of the driver explaining
    it (:func:`nnts.runners.known_classes.explain`), then shrink, keeping only steps that fail the same way
    (:func:`same_failure`) and are explained by the same class (or by none, as the original), and
    save the smallest such model. A failure of the reference itself is a reference bug, named as
    such. ``support`` (:class:`nnts.runners.support.Support`): the driver's, what a partial
    driver's case is drawn from; ``across``: a graph across devices (:func:`check`), drawn from
    the support and as many operations it does not support (:meth:`Support.across_graph`).
    ``crash_file``: where the case's model is saved as it reaches the driver (and removed once the
    driver has run it), the reproducer of an in-process driver that takes this process with it.
    ``options`` go to :func:`nnts.generators.random_graphs.generate`."""
    if graph is None and across:
        graph = support.across_graph(seed, case_size(seed))
    elif graph is None:
        drawn = {} if support is None else support.options()
        graph = generate(seed, options.pop("num_operations", case_size(seed)), level=level, **{**drawn, **options})
    if not graph.operations:  # every draw was one the driver's support refuses
        return CaseResult("skip", f"unsupported: seed {seed} drew no operation the driver supports "
                                  f"({support.summary() if support is not None else 'no support facts'})", graph)
    def keep_for_a_crash(expected: list[np.ndarray]) -> None:
        save_reproducer(graph, Outcome("crash", expected=expected), crash_file.parent, driver,
                        {"original": "crash: the driver ended the process running it", "class": "none"},
                        support, criteria, path=crash_file)

    outcome = check(graph, devices, reference, criteria, across, keep_for_a_crash if crash_file else None)
    if crash_file is not None:  # the driver returned: no crash to reproduce
        crash_file.unlink(missing_ok=True)
    if outcome.status != "fail":
        return CaseResult(outcome.status, outcome.message, graph)
    explained = None if outcome.reference_failed else explain(graph, outcome, driver)

    def fails(g: Graph) -> bool:
        smaller = check(g, devices, reference, criteria, across)
        return (smaller.status == "fail" and same_failure(outcome.failure, smaller.failure)
                and (outcome.reference_failed or explain(g, smaller, driver) == explained))

    shrunk = shrink(graph, fails)
    final = check(shrunk, devices, reference, criteria, across)
    if not (final.status == "fail" and same_failure(outcome.failure, final.failure)):
        shrunk, final = graph, outcome  # a driver that fails one way, then another: keep what was found
    record = {"original": str(outcome.failure), "shrunk": str(final.failure),
              "class": explained or "not explained by a documented class"}
    path, replay = save_reproducer(shrunk, final, folder, driver, record, support, criteria)
    verdict = f"explained by {explained}" if explained else (
        "not explained by a documented class" if classes_for(driver) and not outcome.reference_failed else "")
    message = (("REFERENCE BUG: " if outcome.reference_failed else "") +
               f"random graph seed {seed}, {operation_summary(graph)}: {outcome.message}\n"
               f"failure: {outcome.failure}" + (f"; {verdict}" if verdict else "") + "\n"
               f"shrunk to {operation_summary(shrunk)}: {final.message}\n"
               f"operations: {describe_model(shrunk.to_test(path.stem).model)}\n"
               f"shrunk failure: {final.failure}\nreproducer: {path}\nreplay: {replay}")
    picture = picture_beside(path)  # the shrunk model's graph, where Graphviz is installed
    if picture is not None:
        message += f"\ngraph: {picture}"
    return CaseResult("fail", message, graph, shrunk, path, explained, outcome.failure)


def same_failure(original: Failure | None, smaller: Failure | None) -> bool:
    """Whether ``smaller`` is the failure ``original`` (same kind; for a mismatch the same
    operation producing the first mismatching output and the same aspect, values or shape; for
    a result code the same error text)."""
    return original is not None and original == smaller


def run_single(seed: int, devices: Sequence[Device], reference: Sequence[Device], level: int,
               folder: str | Path, driver: str, support=None, crash_file: Path | None = None) -> CaseResult:
    """Single-operation case ``seed`` (of the operations ``support`` allows): generate, compare
    with the operation's tier; on a failure shrink (dimension cuts) and save the smallest failing
    model (``crash_file``: as :func:`run_case`)."""
    code = single.case_operation(seed, support)
    graph = single.generate_case(seed, level, support)
    if not graph.operations:
        return CaseResult("skip", f"{code.name}: no valid operation drawn at feature level {int(level)} in "
                                  f"{single.ATTEMPTS} attempts", graph)
    table = single.criteria_for(code, graph)
    result = run_case(seed, devices, reference, level, folder, driver, graph=graph, criteria=table, support=support,
                      crash_file=crash_file)
    if result.status == "fail":
        size = math.prod(graph.values[graph.inputs[0]].shape) if graph.inputs else 0
        result.message = (f"{code.name} ({ops.get(code).accuracy_at(graph.min_level())} criteria"
                          f"{', relaxed model' if graph.relaxed else ''}, first input of {size} elements): "
                          + result.message)
    return result

