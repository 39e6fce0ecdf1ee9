"""AOSP's own CPU executor as a driver (``nnts aosp-driver build``, ``nnts/sdk/aosp/``).

The build's errors are checked everywhere (one line naming what is missing). The driver itself is
built from ``../shared/aosp-native`` only where that checkout and the Debian packages are present,
and only from object files already compiled into the shared build folder (``aosp-driver`` in
nnts's cache folder, ``~/.cache/nnts`` by default; CI's AOSP step fills it): every object is named
by a hash of what made it, so reusing one is safe, and the test then costs a link (seconds)
instead of the twenty minutes a first build takes on two cores."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import (Compilation, Execution, Memory, MemoryDesc, Model, NnapiError, OperandCode as T, OperandType,
                       OperationCode, ResultCode, hal, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnts.cli import aosp_driver
from nnts.runners.settings import Settings

from . import support

ROOT = Path(__file__).resolve().parents[1]
AOSP = ROOT.parent / "shared" / "aosp-native"


def nnts(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnts", *args], check=False, capture_output=True, text=True, timeout=120)


def test_build_names_a_missing_checkout_in_one_line(tmp_path):
    done = nnts("aosp-driver", "build", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "nowhere: no such folder" in done.stderr


def test_build_names_the_first_missing_part_of_the_layout(tmp_path):
    (tmp_path / "neuralnetworks" / "common").mkdir(parents=True)
    (tmp_path / "neuralnetworks" / "common" / "CpuExecutor.cpp").write_text("")
    done = nnts("aosp-driver", "build", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    assert "lacks litert/tflite/kernels/internal/types.h" in done.stderr
    assert "TFLite" in done.stderr and done.stderr.strip().count("\n") == 0


def test_unbuilt_operations_become_registrations_of_nothing():
    assert aosp_driver.unregistered_cpp(["REVERSE"]).count("register_REVERSE() { return nullptr; }") == 1


@pytest.fixture(scope="module")
def driver() -> Path:
    if not AOSP.is_dir():
        pytest.skip("needs ../shared/aosp-native (AOSP's NNAPI sources and what they build against)")
    try:
        aosp_driver.check(AOSP, "g++")
    except aosp_driver.BuildError as e:
        pytest.skip(str(e))
    out = aosp_driver.default_out(Settings.from_environment(os.environ))
    if out is None:
        pytest.skip("NNTS_CACHE_DIR is empty (no cache): no shared AOSP driver build to link from")
    try:
        result = aosp_driver.build(AOSP, out, jobs=2, compile_limit=4)
    except aosp_driver.NotCompiledYet as e:
        pytest.skip(f"{e}: run `nnts aosp-driver build ../shared/aosp-native --out {out}` first (CI's AOSP step does)")
    return result.binary


def test_aosp_driver_passes_the_corpus_on_a_sample_of_operations(driver):
    code, output, failed = support.run_suite(
        f"remote:{driver}", ["cts/test_generated.py", "vts/test_validate_model.py", "vts/test_validate_request.py"],
        "op_ADD or op_REDUCE_MAX or op_ARGMAX or op_REVERSE or op_LSH_PROJECTION")
    assert code == 0 and not failed, output[-3000:]
    assert " passed" in output


def test_the_manifest_names_each_operation_not_built_with_its_reason(driver):
    manifest = json.loads(driver.with_suffix(".json").read_text())
    assert set(manifest["unsupported_operations"]) >= {"LSH_PROJECTION", "REVERSE"}
    assert all("does not compile" in reason for reason in manifest["unsupported_operations"].values())


def test_memory_for_a_scalar_role_when_the_driver_allocates_none():
    """RANK's output is a scalar: memory from a descriptor of that role has no dimensions and the
    scalar's size, as AOSP's runtime sizes it (TypeManager::getSizeOfData of a scalar type is its
    element size). The runtime refused it as "not fully specified" whenever the driver allocates no
    device memory (found by the AOSP driver, which allocates none: RANK's device-memory variant)."""
    class NoDeviceMemory(ReferenceDevice):
        def allocate(self, desc, prepared_models, input_roles, output_roles):
            raise hal.HalError(hal.ErrorStatus.GENERAL_FAILURE, "no device memory here")

    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2, 3, 1]))
    rank = model.add_operand(OperandType(T.INT32))
    model.add_operation(OperationCode.RANK, [x], [rank])
    model.identify_inputs_and_outputs([x], [rank])
    model.finish()
    with using_drivers([NoDeviceMemory()]) as devices:
        compilation = Compilation(model, devices)
        compilation.finish()
        desc = MemoryDesc()
        desc.add_output_role(compilation, 0)
        desc.finish()
        memory = Memory.from_desc(desc)
        execution = Execution(compilation)
        execution.set_input(0, np.zeros((2, 3, 1), np.float32))
        execution.set_output_from_memory(0, memory, 0, 0)
        execution.compute()
    assert memory.buffer is None and memory.shared.buffer.view(np.int32).tolist() == [3]


REPRODUCERS = sorted((ROOT / "docs" / "conformance" / "aosp-cpu").glob("*.json"))


def test_every_class_reproducer_passes_on_the_reference():
    """docs/conformance/aosp-cpu.md's classes: each reproducer is a model nnapi_ref runs correctly."""
    assert REPRODUCERS
    for path in REPRODUCERS:
        assert nnts("vectors", "run", str(path), "--driver", "reference", "-q").returncode == 0, path.name


def test_every_class_reproducer_still_fails_on_the_aosp_driver(driver, tmp_path):
    """... and AOSP's executor does not (it fails, crashes or differs), every model of a file
    holding several: the page goes stale loudly when a checkout fixes one."""
    for path in REPRODUCERS:
        results = tmp_path / f"{path.stem}.json"
        assert nnts("vectors", "run", str(path), "--driver", f"remote:{driver}", "-q",
                    "--json", str(results)).returncode != 0, path.name
        passed = [r["name"] for r in json.loads(results.read_text())["results"] if r["status"] == "passed"]
        assert not passed, f"{path.name}: {passed} pass on AOSP"


@pytest.mark.parametrize("in_dims, out_dims, valid", [
    ([1, 0, 0], [1, 1, 1], False),   # an unknown input dimension before a known output: refused
    ([1, 0, 0], [1, 0, 0], True),
    ([1, 0, 0], [], True),           # output of unknown rank
    ([1, 1, 1], [0, 0, 0], True),    # output of no known elements
    ([2, 3, 1], [2, 3, 1], True),
])
def test_cast_declared_dimensions_as_aosps_validation(in_dims, out_dims, valid):
    """AOSP's CAST validation (common/types/operations/src/Cast.cpp, read by hand):
    ``inputShape.dimensions.empty() || outputShape.dimensions.empty() ||
    getNumberOfElements(outputShape.dimensions) == 0 || inputShape.dimensions ==
    outputShape.dimensions`` — the dimensions compared literally, so ANeuralNetworksModel_finish
    refuses (BAD_DATA) a CAST whose input has an unknown dimension where its output has a known
    one. nnapi_ref accepted it, and its random-graph generator made such models (found by the AOSP
    driver: most of its random-graph failures)."""
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2, 3, 1] if 0 not in in_dims else [1, 1, 1]))
    t = model.add_operand(OperandType(T.TENSOR_FLOAT32, in_dims))
    out = model.add_operand(OperandType(T.TENSOR_INT32, out_dims))
    model.add_operation(OperationCode.RELU, [x], [t])
    model.add_operation(OperationCode.CAST, [t], [out])
    model.identify_inputs_and_outputs([x], [out])
    if valid:
        model.finish()
    else:
        with pytest.raises(NnapiError) as e:
            model.finish()
        assert e.value.code == ResultCode.BAD_DATA and "CAST" in e.value.message
