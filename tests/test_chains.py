"""Rounding chains (nnts.generators.chains, cts/test_random_graph.py::test_random_chain): a quantized
operation of the driver's support, then a SUB of a near copy of its result that magnifies a
one-step rounding difference; the seed and support name the chain, and the faults that round the
wrong way within every per-operation tolerance fail it."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref import vectors
from nnapi_ref.drivers import partial
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators import chains
from nnts.runners.differential import run_case
from nnts.runners.model_runner import run_test
from nnts.runners.support import probe

REFERENCE = [Device(ReferenceDevice())]


@pytest.fixture(scope="module")
def quant8_only():
    return probe([partial.quant8_only()])


def test_every_operation_on_its_first_quantized_type_comes_first(quant8_only):
    pairs = chains.case_pairs(quant8_only)
    first = pairs[:len({code for code, _ in pairs})]
    assert [code for code, _ in first] == sorted({code for code, _ in pairs})
    assert first[0] == (Op.ADD, T.TENSOR_QUANT8_ASYMM) and (Op.ADD, T.TENSOR_QUANT8_ASYMM_SIGNED) in pairs
    assert all(t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED) for _, t in pairs)
    assert Op.ARGMAX not in {code for code, _ in pairs}  # no quantized result to magnify


def test_seed_and_support_name_the_chain_and_its_sub_magnifies(quant8_only):
    graph, code = chains.generate_case(0, quant8_only.level, quant8_only)
    again, _ = chains.generate_case(0, quant8_only.level, quant8_only)
    assert code == Op.ADD and graph.operation_names == ["ADD", "SUB"] == again.operation_names
    assert all(np.array_equal(graph.values[k], again.values[k]) for k in graph.values)
    result, difference = graph.operations[0].outputs[0], graph.operations[1].outputs[0]
    assert graph.values[result].size >= chains.MIN_ELEMENTS
    magnified = graph.operands[result].scale / graph.operands[difference].scale
    assert 4 <= magnified <= 8, magnified


@pytest.mark.parametrize("fault", ["add_quant8_truncating", "wrong_add_quant8_by_one"])
def test_a_one_step_fault_fails_the_chain_and_its_reproducer_replays(quant8_only, fault, tmp_path):
    """Both are within ADD's own tier (bias 1.2): the chain's bias or MSE shows them; the
    reference's chain passes, and the saved reproducer fails the faulty driver only."""
    driver = partial.make("quant8_only", fault)
    graph, _ = chains.generate_case(0, quant8_only.level, quant8_only)
    assert run_case(graph.seed, REFERENCE, REFERENCE, quant8_only.level, tmp_path, "reference",
                    graph=graph).status == "pass"
    result = run_case(graph.seed, [Device(driver)], REFERENCE, quant8_only.level, tmp_path,
                      f"nnapi_ref.drivers.partial:quant8_only__{fault}", graph=graph, support=quant8_only)
    assert result.status == "fail" and ("bias:" in result.message or "mse:" in result.message), result.message
    test = vectors.load_file(result.reproducer)[0]
    assert run_test(test, [Device(partial.make("quant8_only", fault))]).status == "fail"
    assert run_test(test, [Device(partial.quant8_only())]).status == "pass"
