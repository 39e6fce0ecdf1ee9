"""ANeuralNetworksCompilation_addExtensionAttribute / ANeuralNetworksExecution_addExtensionAttribute:
the NDK's rules, and the hints reaching the driver (the HAL's prepare_model_with_config and
execute_*_with_config) in process, served by `nnts serve` and served by the native SDK."""
from __future__ import annotations

import shlex

import numpy as np
import pytest

from nnapi_ref import Burst, Compilation, Execution, NnapiError, ResultCode, hal, using_drivers
from nnapi_ref.drivers.reference import ReferenceBurst, ReferenceDevice, ReferencePreparedModel, check_hints
from nnapi_ref.runtime.devices import Device
from nnapi_ref.runtime.model import extension_prefix
from nnts.generators.builders import add_model
from nnts.runners.drivers import load_driver

from . import native

EXTENSION = "com.example.hints"
A = np.array([1.5, -2.0], np.float32)


def code_of(call, *args) -> ResultCode:
    with pytest.raises(NnapiError) as e:
        call(*args)
    return e.value.code


def single(driver: hal.Device | None = None) -> Compilation:
    return Compilation(add_model(), [Device(driver or ReferenceDevice())])


def run(compilation: Compilation, attributes=(), mode: str = "compute") -> np.ndarray:
    execution = Execution(compilation)
    for code, value in attributes:
        execution.add_extension_attribute(EXTENSION, code, value)
    out = np.zeros(2, np.float32)
    execution.set_input(0, A.copy())
    execution.set_input(1, A.copy())
    execution.set_output(0, out)
    if mode == "burst":
        execution.burst_compute(Burst(compilation))
    elif mode == "async":
        execution.start_compute().wait()
    elif mode == "fenced":
        execution.start_compute_with_dependencies([]).wait()
    else:
        execution.compute()
    return out


def test_the_compilation_call_follows_the_ndk_rules():
    compilation = single()
    assert code_of(compilation.add_extension_attribute, None, 1, b"") == ResultCode.UNEXPECTED_NULL
    assert code_of(compilation.add_extension_attribute, EXTENSION, 1 << 16, b"") == ResultCode.BAD_DATA
    compilation.add_extension_attribute(EXTENSION, 1, b"x")
    compilation.add_extension_attribute(EXTENSION, 2, None)  # no data, length 0
    assert code_of(compilation.add_extension_attribute, EXTENSION, 1, b"y") == ResultCode.BAD_DATA  # twice
    compilation.finish()
    assert code_of(compilation.add_extension_attribute, EXTENSION, 3, b"") == ResultCode.BAD_STATE
    with using_drivers([ReferenceDevice("a"), ReferenceDevice("b")]):
        assert code_of(Compilation(add_model()).add_extension_attribute, EXTENSION, 1, b"") == ResultCode.BAD_DATA
        two = Compilation(add_model(), [Device(ReferenceDevice("a")), Device(ReferenceDevice("b"))])
        assert code_of(two.add_extension_attribute, EXTENSION, 1, b"") == ResultCode.BAD_DATA


def test_the_execution_call_follows_the_ndk_rules():
    compilation = single()
    compilation.finish()
    execution = Execution(compilation)
    assert code_of(execution.add_extension_attribute, None, 1, b"") == ResultCode.UNEXPECTED_NULL
    execution.add_extension_attribute(EXTENSION, 7, b"\x01")
    assert code_of(execution.add_extension_attribute, EXTENSION, 7, b"\x02") == ResultCode.BAD_DATA
    execution.set_input(0, A.copy())
    execution.set_input(1, A.copy())
    execution.set_output(0, np.zeros(2, np.float32))
    execution.compute()
    assert code_of(execution.add_extension_attribute, EXTENSION, 8, b"") == ResultCode.BAD_STATE
    with using_drivers([ReferenceDevice("a"), ReferenceDevice("b")]):
        everywhere = Compilation(add_model())
        everywhere.finish()
        assert code_of(Execution(everywhere).add_extension_attribute, EXTENSION, 1, b"") == ResultCode.BAD_DATA


SEEN: list = []


class Recording(ReferenceDevice):
    """The reference, noting the hints it is handed (in SEEN)."""

    def prepare_model_with_config(self, *args):
        SEEN.append(("prepare", args[-1]))
        prepared = super().prepare_model_with_config(*args)
        return _RecordingModel(prepared.device, prepared.model, prepared.plans)


class _RecordingModel(ReferencePreparedModel):
    def execute_synchronously_with_config(self, *args):
        SEEN.append(("execute", args[-1]))
        return super().execute_synchronously_with_config(*args)


def test_hints_reach_the_driver_in_process_with_the_models_prefix_numbering():
    SEEN.clear()
    compilation = single(Recording("recording"))
    compilation.add_extension_attribute(EXTENSION, 3, b"fast")
    compilation.finish()
    np.testing.assert_array_equal(run(compilation, [(9, b"\x00\x01")]), A + A)
    prefix = extension_prefix(EXTENSION, "test")
    mapping = (hal.ExtensionNameAndPrefix(EXTENSION, prefix),)
    assert SEEN == [("prepare", hal.Hints((hal.TokenValuePair(prefix << 16 | 3, b"fast"),), mapping)),
                              ("execute", hal.Hints((hal.TokenValuePair(prefix << 16 | 9, b"\x00\x01"),), mapping))]


def test_the_reference_refuses_malformed_hints():
    prepared = ReferenceDevice().prepare_model(add_model().hal_model, 1, 100, None, (), (), None)
    hints = hal.Hints((hal.TokenValuePair(5 << 16, b""), hal.TokenValuePair(5 << 16, b"")),
                      (hal.ExtensionNameAndPrefix(EXTENSION, 5),))
    unmapped = hal.Hints((hal.TokenValuePair(6 << 16, b""),), (hal.ExtensionNameAndPrefix(EXTENSION, 5),))
    for bad in (hints, unmapped):
        with pytest.raises(hal.HalError) as e:
            prepared.execute_synchronously_with_config(hal.Request([], [], []), False, None, 0, bad)
        assert e.value.status == hal.ErrorStatus.INVALID_ARGUMENT


class EchoHints(ReferenceDevice):
    """A served driver that fails any call with hints, naming them: what it was handed comes back
    in the error message."""

    @staticmethod
    def _refuse(hints: hal.Hints):
        check_hints(hints)
        described = " ".join(f"{h.token & 0xFFFF}={h.value.decode()}" for h in hints.hints)
        names = " ".join(p.name for p in hints.extension_name_to_prefix)
        raise hal.HalError(hal.ErrorStatus.GENERAL_FAILURE, f"hints {described} of {names}")

    def prepare_model_with_config(self, *args):
        self._refuse(args[-1])

    def prepare_model(self, *args):
        prepared = super().prepare_model(*args)
        return _EchoingModel(prepared.device, prepared.model, prepared.plans)


class _EchoingModel(ReferencePreparedModel):
    def configure_execution_burst(self):
        return _EchoingBurst(self)

    def execute_synchronously_with_config(self, *args):
        EchoHints._refuse(args[-1])

    def execute_with_config(self, *args):
        EchoHints._refuse(args[-1])

    def execute_fenced_with_config(self, *args):
        EchoHints._refuse(args[-1])


class _EchoingBurst(ReferenceBurst):
    def execute_with_config(self, *args):
        EchoHints._refuse(args[-1])


HINTS_DRIVER = r'''
#include <stdio.h>
#include <string.h>
#include "nnts/driver.h"
/* Fails any call with hints, naming them; adds without. */
static int32_t echo(nnts_error *e, uint32_t n, const nnts_hint *h, uint32_t m, const nnts_extension_prefix *x)
{
    int at = snprintf(e->message, sizeof e->message, "hints");
    for (uint32_t i = 0; i < n && at < 128; i++)
        at += snprintf(e->message + at, sizeof e->message - at, " %d=%.*s", h[i].token & 0xFFFF, (int)h[i].length,
                       (const char *)h[i].value);
    at += snprintf(e->message + at, sizeof e->message - at, " of");
    for (uint32_t i = 0; i < m && at < 200; i++)
        at += snprintf(e->message + at, sizeof e->message - at, " %s", x[i].name);
    return NNTS_GENERAL_FAILURE;
}
static int32_t supported(void *c, const nnts_model *m, bool *s, nnts_error *e)
{ (void)c, (void)e; for (uint32_t i = 0; i < m->main.operation_count; i++) s[i] = true; return NNTS_NONE; }
static int32_t prepare(void *c, const nnts_model *m, const nnts_prepare_options *o, void **p, nnts_error *e)
{
    (void)c, (void)m;
    if (o->hint_count) return echo(e, o->hint_count, o->hints, o->hint_extension_count, o->hint_extensions);
    *p = e;
    return NNTS_NONE;
}
static int32_t execute(void *c, void *p, const nnts_request *q, const nnts_execution_options *o, nnts_output_shape *s,
                       nnts_timing *t, nnts_error *e)
{
    (void)c, (void)p, (void)t;
    if (o->hint_count) return echo(e, o->hint_count, o->hints, o->hint_extension_count, o->hint_extensions);
    const float *a = q->inputs[0].data, *b = q->inputs[1].data;
    float *out = q->outputs[0].data;
    for (uint32_t i = 0; i < q->outputs[0].length / 4; i++) out[i] = a[i] + b[i];
    s[0].rank = 1, s[0].dimensions[0] = q->outputs[0].length / 4, s[0].is_sufficient = true;
    return NNTS_NONE;
}
static const nnts_operand_performance PERFORMANCE[] = {{1, {1, 1}}, {3, {1, 1}}};
int main(int argc, char **argv)
{
    nnts_driver d = {.abi_version = NNTS_DRIVER_ABI_VERSION, .info = {.name = "hints", .feature_level = 1000007,
                     .type = 4, .relaxed_scalar = {1, 1}, .relaxed_tensor = {1, 1}, .if_performance = {1, 1},
                     .while_performance = {1, 1}, .operand_performance_count = 2, .operand_performance = PERFORMANCE},
                     .get_supported_operations = supported, .prepare_model = prepare, .execute = execute};
    return nnts_serve(&d, argc, argv);
}
'''


@pytest.fixture(scope="module", params=["nnts serve", "SDK"])
def served(request, tmp_path_factory):
    if request.param == "nnts serve":
        device = load_driver("remote:nnts serve tests.test_extension_attributes:EchoHints")
    else:
        if native.compilers() is None:
            pytest.skip(native.missing_compiler_reason())
        folder = tmp_path_factory.mktemp("hints_driver")
        source = folder / "hints_driver.c"
        source.write_text(HINTS_DRIVER)
        binary = native.build(source, folder, "hints_driver", native.objects_folder(tmp_path_factory))
        device = load_driver(f"remote:{shlex.quote(str(binary))}")
    yield device
    device.close()


@pytest.mark.parametrize("mode", ["compute", "async", "fenced", "burst"])
def test_hints_travel_to_a_served_driver(served, mode):
    """A compilation's hints reach prepare, an execution's every execution mode; without hints
    the driver runs (and the served hint-less path is unchanged)."""
    with_hint = single(served)
    with_hint.add_extension_attribute(EXTENSION, 3, b"fast")
    with pytest.raises(NnapiError) as e:
        with_hint.finish()
    assert f"hints 3=fast of {EXTENSION}" in e.value.message
    compilation = single(served)
    compilation.finish()
    np.testing.assert_array_equal(run(compilation, (), mode), A + A)
    with pytest.raises(NnapiError) as e:
        run(compilation, [(4, b"a"), (5, b"bc")], mode)
    assert f"hints 4=a 5=bc of {EXTENSION}" in e.value.message


def test_a_served_driver_gets_no_malformed_hints(served):
    """A token twice is INVALID_ARGUMENT: the SDK checks hints before the driver sees them (the
    Python driver here checks them as the reference does)."""
    twice = hal.Hints((hal.TokenValuePair(5 << 16, b""), hal.TokenValuePair(5 << 16, b"")),
                      (hal.ExtensionNameAndPrefix(EXTENSION, 5),))
    with pytest.raises(hal.HalError) as e:
        served.prepare_model_with_config(add_model().hal_model, 1, 100, None, (), (), None, twice)
    assert e.value.status == hal.ErrorStatus.INVALID_ARGUMENT
