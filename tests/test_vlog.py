"""Verbose logs (NNTS_VLOG, as NNAPI's debug.nn.vlog): the partitioner says which device each
operation goes to and why; the values NNAPI accepts switch the components on."""
import logging
import subprocess
import sys

import pytest

from nnapi_ref import Compilation, OperationCode, using_drivers, vlog
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.drivers.variants import FaultyDevice, SubsetDevice
from nnapi_ref.hal import ErrorStatus
from nnts.formats.paths import CORPUS
from nnts.generators.builders import chain_model


@pytest.fixture
def vlogging():
    def switch(spec):
        return vlog.configure(spec)
    yield switch
    vlog.configure("")


def test_compilation_log_names_each_operations_device_and_why(vlogging, caplog):
    vlogging("compilation")
    adder = SubsetDevice("adder", [OperationCode.ADD], 0.5)
    with caplog.at_level(logging.INFO, logger="nnts"), using_drivers([ReferenceDevice(), adder]):
        compilation = Compilation(chain_model())
        compilation.finish()
    decisions = [r for r in caplog.records if r.name == "nnts.CompilationBuilder"
                 and "findBestDeviceForEachOperation" in r.getMessage()]
    assert [(r.getMessage().split("(")[1].split(")")[0], r.getMessage().split("device ")[1].split(":")[0])
            for r in decisions] == [("ADD", "adder"), ("MUL", "nnapi-reference"), ("ADD", "adder")]
    mul = decisions[1].getMessage()
    assert "supported by nnapi-reference" in mul and "not supported by adder" in mul
    assert "nnapi-reference 1, adder 0.5" in decisions[0].getMessage()  # the performance that decided it
    steps = [r.getMessage() for r in caplog.records if r.name == "nnts.ExecutionPlan"]
    assert steps == ["step 0: adder runs operations [0]", "step 1: nnapi-reference runs operations [1]",
                     "step 2: adder runs operations [2]"]


def test_cpu_fallback_is_logged_with_the_drivers_error(vlogging, caplog):
    vlogging("compilation execution")
    broken = FaultyDevice("broken", fail_prepare=ErrorStatus.GENERAL_FAILURE)
    with caplog.at_level(logging.INFO, logger="nnts"), using_drivers([broken]):
        compilation = Compilation(chain_model())
        compilation.finish()
    assert any("prepare on broken failed" in r.getMessage() and "injected prepare failure" in r.getMessage()
               and "CPU fallback" in r.getMessage()
               for r in caplog.records)


def test_components_off_log_nothing(vlogging, caplog):
    vlogging("model")
    with caplog.at_level(logging.INFO, logger="nnts"), using_drivers([ReferenceDevice()]):
        Compilation(chain_model()).finish()
    assert {r.name for r in caplog.records} == {"nnts.ModelBuilder"}


@pytest.mark.parametrize("spec, expected", [("all", set(vlog.COMPONENTS)), ("1", set(vlog.COMPONENTS)),
                                            ("model:compilation", {"model", "compilation"}),
                                            ("cpuexe, manager", {"cpuexe", "manager"}), ("", set())])
def test_vlog_values_as_debug_nn_vlog(spec, expected):
    assert vlog.parse(spec) == expected


def test_unknown_component_is_refused():
    with pytest.raises(ValueError, match="kernel"):
        vlog.parse("model,kernel")


def test_environment_switches_logs_to_stderr():
    """NNTS_VLOG is read by nnts's entry points: here the nnts command, whose workers inherit it."""
    done = subprocess.run([sys.executable, "-m", "nnts", "vectors", "run", "--jobs", "1", str(CORPUS / "arithmetic.json")],
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "NNTS_VLOG": "model,compilation"})
    assert done.returncode == 0, done.stderr
    assert "I nnts.ModelBuilder: finish" in done.stderr and "nnts.ExecutionPlan" in done.stderr
