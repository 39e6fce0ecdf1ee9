"""A driver's support learned by probing it (nnts.runners.support), ``nnts support``, and random
cases drawn from a partial driver's support (nnapi_ref.drivers.partial)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from nnapi_ref import vectors
from nnapi_ref.drivers import partial
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators import single
from nnts.generators.random_graphs import case_size, generate
from nnts.runners import support as support_module
from nnts.runners.model_runner import build_model
from nnts.runners.support import BY_LEVEL, BY_OPERATION, BY_TYPE, SUPPORTED, UNSUPPORTED, Support, learn, probe

from .support import ROOT


@pytest.fixture(scope="module")
def npu13():
    return probe([partial.npu13()])


def _row(support: Support, operation: str, data_type: str):
    return next(r for r in support.rows if r.operation == operation and r.data_type == data_type)


def test_the_reference_is_complete():
    facts = probe([ReferenceDevice()])
    assert facts.complete and facts.options() == {}
    assert len(facts.operations()) > 90


def test_a_partial_driver_names_each_reason(npu13):
    assert not npu13.complete
    assert [c.name for c in npu13.operations()] == sorted(c.name for c in partial.NPU13.operations)
    assert _row(npu13, "ADD", "TENSOR_QUANT8_ASYMM").status == SUPPORTED
    assert (_row(npu13, "ADD", "TENSOR_FLOAT16").status, _row(npu13, "ADD", "TENSOR_FLOAT16").reason) == \
        (UNSUPPORTED, BY_TYPE)
    assert _row(npu13, "TANH", "TENSOR_FLOAT32").reason == BY_OPERATION
    assert (_row(npu13, "REVERSE", "TENSOR_FLOAT32").status, _row(npu13, "REVERSE", "TENSOR_FLOAT32").reason) == \
        (UNSUPPORTED, BY_LEVEL)  # a level-8 operation on a level-30 driver: no probe asked
    level27 = probe([partial.float32_level27()])
    assert _row(level27, "ADD", "TENSOR_QUANT8_ASYMM").reason == BY_TYPE
    assert _row(level27, "SUB", "TENSOR_FLOAT32").reason == BY_LEVEL


def test_signatures_decide_and_unknown_ones_follow_their_type(npu13):
    assert npu13.allows(Op.ADD, (T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.INT32), (T.TENSOR_FLOAT32,))
    assert not npu13.allows(Op.ADD, (T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.INT32), (T.TENSOR_FLOAT16,))
    assert not npu13.allows(Op.TANH, (T.TENSOR_FLOAT32,), (T.TENSOR_FLOAT32,))


def test_facts_round_trip_through_json(npu13):
    again = Support.from_json(json.loads(json.dumps(npu13.to_json())))
    assert again == npu13
    for bad in ({}, {"format": "nnts-support/1"}, {"format": "nnts-support/1", "rows": [{}], "signatures": [],
                                                   "drivers": [], "level": 30}, []):
        with pytest.raises(ValueError):
            Support.from_json(bad)


class CountingDevice(ReferenceDevice):
    asked = 0

    def get_supported_operations(self, model):
        type(self).asked += 1
        return super().get_supported_operations(model)


def test_learned_once_and_cached_by_identity(tmp_path):
    CountingDevice.asked = 0
    threads = [threading.Thread(target=learn, args=([CountingDevice()], 30, tmp_path)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = CountingDevice.asked
    assert first > 100  # one process probed, the other waited and read the file
    assert learn([CountingDevice()], 30, tmp_path) == probe([ReferenceDevice()], 30) and CountingDevice.asked == first
    learn([CountingDevice()], 29, tmp_path)  # another feature level is another entry
    assert CountingDevice.asked > first
    entry = support_module.cache_path([CountingDevice()], 30, tmp_path)
    entry.write_text("{damaged", encoding="utf-8")
    assert learn([CountingDevice()], 30, tmp_path).complete  # computed afresh


@pytest.mark.parametrize("name", ["npu13", "quant8_only", "float32_level27"])
def test_random_cases_of_a_partial_driver_run_on_it(name):
    driver = getattr(partial, name)()
    facts = probe([driver])
    devices = [Device(driver)]
    ran = sizes = 0
    for seed in range(40):
        graph = generate(seed, case_size(seed), level=facts.level, **facts.options())
        supported = build_model(graph.to_test("g").model).get_supported_operations_for_devices(devices)
        ran += graph.operations != [] and all(supported)
        sizes += len(graph.operations) == case_size(seed)
    assert ran >= 38 and sizes >= 38, (ran, sizes)  # at least 95%, at today's sizes
    cases = [single.generate_case(seed, facts.level, facts) for seed in range(40)]
    ran = sum(bool(g.operations) and all(build_model(g.to_test("s").model).get_supported_operations_for_devices(
        devices)) for g in cases)
    assert ran >= 38, ran
    assert {single.case_operation(s, facts) for s in range(200)} == set(facts.operations())


def test_seed_and_support_name_the_case(npu13):
    again = probe([partial.npu13()])
    for seed in (3, 4, 149):
        a = generate(seed, case_size(seed), level=npu13.level, **npu13.options())
        b = generate(seed, case_size(seed), level=again.level, **again.options())
        assert json.dumps(vectors.test_to_json(a.to_test("x"))) == json.dumps(vectors.test_to_json(b.to_test("x")))


def _nnts(*args, env=None):
    return subprocess.run([sys.executable, "-m", "nnts", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def test_support_command(tmp_path):
    env = dict(os.environ, NNTS_CACHE_DIR=str(tmp_path))
    done = _nnts("support", "--driver", "nnapi_ref.drivers.partial:npu13", env=env)
    assert done.returncode == 0, done.stderr
    assert "13 operations on" in done.stdout
    assert any(line.split()[:2] == ["TANH", "TENSOR_FLOAT32"] and "unsupported (operation)" in line
               for line in done.stdout.splitlines())
    done = _nnts("support", "--driver", "nnapi_ref.drivers.partial:npu13", "--json", env=env)
    assert Support.from_json(json.loads(done.stdout)).operations() == sorted(partial.NPU13.operations)
    for bad in (["--driver", "no_such_module:x"], ["--feature-level", "3"], ["--driver", ""]):
        done = _nnts("support", *bad, env=env)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_report_names_why_the_driver_does_not_support(npu13):
    from nnts.reports import conformance, results
    record = {"id": "cts/test_generated.py::test_generated[TANH-TENSOR_FLOAT32-tanh_1]", "test": None,
              "part": "CTS generated", "op": "TANH", "dtype": "TENSOR_FLOAT32", "variant": None,
              "status": "unsupported", "phase": "call", "duration_s": 0.0, "message": "unsupported: TANH",
              "reproducer": None, "replay": None, "graph": None}
    page = conformance.render(results.to_json({"driver_spec": "d", "support": npu13.table()}, [record]))
    start = page.index('<h2 id="unsupported">')
    unsupported = page[start:page.index("<h2 ", start + 1)]
    assert "operand type" in unsupported and "feature level" in unsupported
    row = unsupported[unsupported.index("<td class=\"l\">TANH</td>"):].split("</tr>")[0]
    assert "TENSOR_FLOAT32" in row and "<td class=\"l\">operation</td><td>1</td>" in row  # the one test skipped
    assert "the driver does not support this operation" in page  # the matrix cell says why


def _first_failure(driver, facts, seeds, tmp_path):
    """The first random case (graph, then single operation, seed by seed) failing on ``driver``."""
    from nnts.runners.differential import run_case, run_single
    devices, reference = [Device(driver)], [Device(ReferenceDevice())]
    for seed in seeds:
        result = run_case(seed, devices, reference, facts.level, tmp_path, "d", support=facts)
        if result.status == "fail":
            return result
        result = run_single(seed, devices, reference, facts.level, tmp_path, "d", facts)
        if result.status == "fail":
            return result
    return None


@pytest.mark.parametrize("support_name, fault, seeds", [
    # the first failing case of the default run's 200 (measured; the cases before it pass)
    ("npu13", "add_quant8_truncating", [149]),
    ("quant8_only", "wrong_add_quant8", [58]),
    ("float32_level27", "float16_arithmetic", [2]),
])
def test_partial_broken_drivers_are_caught_by_the_random_cases(support_name, fault, seeds, tmp_path):
    driver = partial.make(support_name, fault)
    facts = probe([driver])
    failure = _first_failure(driver, facts, seeds, tmp_path)
    assert failure is not None, f"{fault} on {support_name}: no random case failed"
    assert all(name in {c.name for c in facts.operations()} for name in failure.shrunk.operation_names)
    recorded = json.loads(failure.reproducer.read_text())["tests"][0]
    assert recorded["drawn_under"]["operations"] == [c.name for c in facts.operations()]
    criterion = failure.message.split("shrunk to ")[1].split(": ", 1)[1].splitlines()[0]
    done = _nnts("vectors", "run", str(failure.reproducer), "--driver", f"nnapi_ref.drivers.partial:{support_name}__{fault}",
                 *(["--dynamic"] if "--dynamic" in failure.message else []))
    assert done.returncode == 1 and criterion in done.stdout, (criterion, done.stdout)  # the same failure, replayed
    done = _nnts("vectors", "run", str(failure.reproducer), "--driver", f"nnapi_ref.drivers.partial:{support_name}")
    assert done.returncode == 0, done.stdout  # and none without the fault


def test_a_stress_failure_is_the_suites_case_with_a_reproducer_that_replays(tmp_path):
    """``nnts stress --tests random_graphs`` draws the suite's seeds from the same support: its
    failure is the suite's case, shrunk, and its reproducer replays to the same failure."""
    driver = "nnapi_ref.drivers.partial:npu13__wrong_output_shape"
    env = dict(os.environ, NNTS_CACHE_DIR=str(tmp_path / "cache"))
    done = _nnts("stress", "--driver", driver, "--tests", "random_graphs", "--duration", "120",
                 "--reproducers", str(tmp_path / "repro"), env=env)
    assert done.returncode == 1 and "FAILURE" in done.stdout, done.stdout + done.stderr
    seed = int(done.stdout.split("random graph seed ")[1].split(",")[0])
    facts = probe([partial.make("npu13", "wrong_output_shape")])
    from nnts.runners.differential import run_case
    suite = run_case(seed, [Device(partial.make("npu13", "wrong_output_shape"))], [Device(ReferenceDevice())],
                     facts.level, tmp_path / "suite", driver, support=facts)
    assert suite.status == "fail" and suite.reproducer.name in done.stdout  # the same case, shrunk alike
    replay = done.stdout.split("replay: ")[1].splitlines()[0].split()
    assert replay[:3] == ["nnts", "vectors", "run"]
    again = _nnts(*replay[1:], env=env)
    shrunk_failure = done.stdout.split("shrunk to ")[1].split(": ", 1)[1].splitlines()[0]
    assert again.returncode == 1 and shrunk_failure in again.stdout, (shrunk_failure, again.stdout)


def test_graphs_across_devices_partition_and_a_failed_step_is_a_failure(tmp_path, npu13):
    from nnapi_ref import using_drivers
    from nnapi_ref.hal import ErrorStatus, HalError
    from nnapi_ref.runtime import get_devices
    from nnts.runners.differential import check, run_case

    class FailsToPrepare(type(partial.npu13())):
        def prepare_model(self, *args):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "out of accelerator memory")

    reference = [Device(ReferenceDevice())]
    with using_drivers([partial.npu13()]):
        devices = get_devices()
        results = [run_case(seed, devices, reference, npu13.level, tmp_path, "d", support=npu13, across=True)
                   for seed in range(10)]
        assert sum(r.status == "pass" for r in results) >= 8, [r.message for r in results]
        mixed = results[[r.status for r in results].index("pass")].graph
        names = {c.name for c in npu13.operations()}
        assert set(mixed.operation_names) & names and set(mixed.operation_names) - names  # both kinds
    with using_drivers([FailsToPrepare()]):
        outcome = check(mixed, get_devices(), reference, across=True)
    assert outcome.status == "fail" and "the driver's part ran on the CPU" in outcome.message, outcome.message


def test_the_suite_runs_a_partial_drivers_random_cases_on_it(tmp_path):
    """Under pytest-xdist the workers share one support (the cache, written once under a lock);
    every random case of the 13-operation driver runs on it, as many as on the reference. The
    report's matrix and unsupported list come from that support (the facts ``nnts support``
    prints): the run's JSON report carries it, and its page lists TANH as unsupported for its
    operation."""
    from nnts.reports import conformance
    env = dict(os.environ, NNTS_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    counts = {}
    for driver in ("nnapi_ref.drivers.partial:npu13", "reference"):
        done = subprocess.run([sys.executable, "-m", "pytest", "cts/test_random_graph.py", "cts/test_random_operation.py",
                               "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "2", "--driver", driver,
                               "--random-graphs", "10", "--random-ops", "10", "--random-chains", "10",
                               "--reproducers", str(tmp_path / "r"), "--report", str(tmp_path / "run.json")],
                              cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False)
        assert done.returncode == 0, done.stdout[-3000:]
        counts[driver] = int(done.stdout.split(" passed")[0].split()[-1])
        if driver != "reference":
            data = json.loads((tmp_path / "run.json").read_text())
            assert data["meta"]["support"] == probe([partial.npu13()]).table()
            unsupported = conformance.render(data).split('<h2 id="unsupported">')[1]
            row = unsupported[unsupported.index('<td class="l">TANH</td>'):].split("</tr>")[0]
            assert '<td class="l">operation</td>' in row, row
    assert counts["nnapi_ref.drivers.partial:npu13"] >= counts["reference"] == 30
    assert len(list((tmp_path / "cache" / "support").glob("*.json"))) == 2  # one per driver, not per worker


def test_partial_drivers_reject_invalid_models_as_the_reference_does():
    import dataclasses

    from nnapi_ref.hal import ErrorStatus, HalError
    graph = generate(0, 1, types=[T.TENSOR_FLOAT32], operations=[Op.RELU], level=30)
    model = graph.to_test("relu").model
    op = model.main.operations[0]
    broken = dataclasses.replace(model.main, operations=[dataclasses.replace(op, inputs=(len(model.main.operands),))])
    invalid = dataclasses.replace(model, main=broken)
    driver = partial.npu13()
    assert driver.get_supported_operations(model) == [True]
    for call in (lambda: driver.get_supported_operations(invalid),
                 lambda: driver.prepare_model(invalid, 1, 100, None, [], [], None)):
        with pytest.raises(HalError) as e:
            call()
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_the_time_to_first_failure_table_names_what_a_support_excludes():
    """nnts.mlts.ttff_partial runs a broken driver under a support only where its fault can show."""
    from nnts.mlts.ttff_partial import not_applicable
    assert not_applicable("npu13", "add_quant8_truncating") is None
    assert "BOX_WITH_NMS_LIMIT" in not_applicable("npu13", "nms_limit_per_class")
    assert "data types" in not_applicable("float32_level27", "off_by_one_rounding")
    assert "feature level 29" in not_applicable("float32_level27", "dilated_depthwise_multiplier")
    assert not_applicable("quant8_only", "ignores_extension_prefix") is None
    assert "extension" in not_applicable("npu13", "ignores_extension_prefix")
    assert "DEQUANTIZE64" in not_applicable("quant8_only", "extension_column_major")
    assert not_applicable("float32_level27", "extension_column_major") is None


def test_a_quant8_only_driver_ignoring_extension_prefixes_is_caught():
    """The extension operation shaped as ADD is built in the driver's type: a quant8-only driver
    that reads operation types by their low 16 bits takes it for its quant8 ADD and is caught; the
    fault-free one rejects it."""
    from nnts.generators.builders import QUANT8, chain_type
    from vts.test_extensions import test_unsupported_extension_operation_is_not_a_builtin as check
    for driver, fails in ((partial.quant8_only(), False), (partial.make("quant8_only", "ignores_extension_prefix"), True)):
        assert chain_type([Device(driver)]) == QUANT8
        if fails:
            with pytest.raises(AssertionError, match="reports the operation supported"):
                check(driver, QUANT8)
        else:
            check(driver, QUANT8)


def test_a_quant8_only_driver_runs_the_execution_sequences_in_quant8_and_they_catch_a_fault():
    """The sequence tests' chain model is built in a type the driver supports: float32 on a
    complete driver, quant8 on a quant8-only one, where the concurrent executions then run (not
    skip), pass on the fault-free driver and catch a scratch buffer shared between executions."""
    from cts.test_sequences import compiled, test_concurrent_executions
    from nnts.generators.builders import FLOAT32, QUANT8, chain_model, chain_type
    assert chain_type([Device(ReferenceDevice())]) == FLOAT32
    for driver, fails in ((partial.quant8_only(), False), (partial.make("quant8_only", "shared_scratch"), True)):
        devices = [Device(driver)]
        assert chain_type(devices) == QUANT8
        compilation = compiled(chain_model(type_=QUANT8), devices)
        if fails:
            with pytest.raises(AssertionError, match="thread"):
                test_concurrent_executions("sync", compilation, QUANT8)
        else:
            test_concurrent_executions("sync", compilation, QUANT8)
