"""Hardware buffers (AHardwareBuffer) through the runtime, the reference driver and the remote
transport: a BLOB buffer is shared memory everywhere; one of an image format runs only where a
device consumes it, never read by the CPU behind the application's back."""
import shlex
import sys

import numpy as np
import pytest

from nnapi_ref import (AHardwareBuffer, Compilation, Execution, HardwareBufferDesc, HardwareBufferFormat, Memory,
                       NnapiError, OperationCode, ResultCode, hal, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice, ReferencePreparedModel
from nnapi_ref.drivers.variants import SubsetDevice
from nnapi_ref.remote import wire
from nnapi_ref.runtime.devices import Device
from nnts.generators.builders import add_model, chain_model
from nnts.runners.drivers import load_driver

A = np.array([1.5, -2.0], np.float32)
B = np.array([0.25, 4.0], np.float32)


class _ConsumesImages(ReferencePreparedModel):
    def _pool(self, pool):
        if isinstance(pool, hal.SharedMemory) and pool.kind == hal.HARDWARE_BUFFER:
            desc = pool.description  # this device reads the image's bytes as they are: tightly packed
            if desc is None or desc.stride != desc.width or desc.width * desc.height * desc.layers * 4 != pool.size:
                raise hal.HalError(hal.ErrorStatus.GENERAL_FAILURE, f"not a packed RGBA image: {desc}")
            return pool
        return super()._pool(pool)


class ImageDevice(ReferenceDevice):
    """A device that consumes hardware buffers of image formats (as a GPU or NPU may)."""

    def prepare_model(self, *args):
        prepared = super().prepare_model(*args)
        return _ConsumesImages(prepared.device, prepared.model, prepared.plans)


def image_input() -> Memory:
    image = AHardwareBuffer.allocate(HardwareBufferDesc(2, 1, 1, HardwareBufferFormat.R8G8B8A8_UNORM))  # 8 bytes
    image.data[:] = A.view(np.uint8)
    return Memory.from_ahardware_buffer(image)


def add_with_image_input(compilation: Compilation) -> np.ndarray:
    execution = Execution(compilation)
    execution.set_input_from_memory(0, image_input(), 0, 0)
    execution.set_input(1, B.copy())
    out = np.zeros(2, np.float32)
    execution.set_output(0, out)
    execution.compute()
    return out


def failure_of(call, *args) -> NnapiError:
    with pytest.raises(NnapiError) as e:
        call(*args)
    return e.value


def test_a_device_that_consumes_image_buffers_runs_them():
    compilation = Compilation(add_model(), [Device(ImageDevice("npu"))])
    compilation.finish()
    np.testing.assert_array_equal(add_with_image_input(compilation), A + B)


def test_the_cpu_never_reads_an_image_buffer():
    """The reference driver cannot map one; with CPU fallback allowed, the runtime's fallback
    cannot either: the execution fails with OP_FAILED."""
    explicit = Compilation(add_model(), [Device(ReferenceDevice())])
    explicit.finish()
    error = failure_of(add_with_image_input, explicit)
    assert error.code == ResultCode.OP_FAILED and "image format" in error.message
    with using_drivers([ReferenceDevice("nnts-other-cpu")]):
        with_fallback = Compilation(add_model())
        with_fallback.finish()
        assert failure_of(add_with_image_input, with_fallback).code == ResultCode.OP_FAILED


def test_a_partitioned_plan_refuses_image_buffers():
    """Between steps the runtime itself would read the buffer on the CPU."""
    with using_drivers([SubsetDevice("adder", [OperationCode.ADD], 0.5)]):
        compilation = Compilation(chain_model((2,), (2,)))
        compilation.finish()
        assert len(compilation.plan.steps) == 3
        error = failure_of(add_with_image_input, compilation)
        assert error.code == ResultCode.OP_FAILED and "partitioned plan" in error.message


def served(spec: str):
    """A compiled ADD on the served driver ``spec``, and the device to close."""
    device = load_driver(spec)
    compilation = Compilation(add_model(), [Device(device)])
    compilation.finish()
    return compilation, device


def add_in_a_blob_buffer(compilation: Compilation) -> np.ndarray:
    buffer = AHardwareBuffer.allocate(HardwareBufferDesc(128))
    memory = Memory.from_ahardware_buffer(buffer)
    buffer.data[64:72] = A.view(np.uint8)
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory, 64, 8)
    execution.set_input(1, B.copy())
    execution.set_output_from_memory(0, memory, 0, 8)
    execution.compute()
    return buffer.data[:8].view(np.float32)


def test_a_served_reference_takes_blob_buffers_and_refuses_image_buffers_itself():
    """The protocol carries both kinds with their description: the served reference maps a BLOB
    buffer, and it is the driver (not the client) that refuses an image format."""
    compilation, device = served("remote:nnts serve reference")
    try:
        assert device.connection.version >= wire.HARDWARE_BUFFER_POOL_VERSION
        np.testing.assert_array_equal(add_in_a_blob_buffer(compilation), A + B)
        error = failure_of(add_with_image_input, compilation)
        assert error.code == ResultCode.OP_FAILED and "cannot be mapped for the CPU" in error.message
    finally:
        device.close()


def test_a_served_driver_that_consumes_image_buffers_gets_them_with_their_description():
    compilation, device = served("remote:nnts serve tests.test_hardware_buffer:ImageDevice")
    try:
        np.testing.assert_array_equal(add_with_image_input(compilation), A + B)
        np.testing.assert_array_equal(add_in_a_blob_buffer(compilation), A + B)
    finally:
        device.close()


OLD_SERVER = ("from nnapi_ref.remote import server, wire; wire.VERSION = 2; "
              "from nnts.runners.drivers import load_driver; server.serve_stdio(load_driver('{}'))")


def test_a_server_of_the_older_protocol_is_spoken_to_in_it():
    """A version 2 server refuses the newer HELLO: the client asks again in version 2, where a
    BLOB buffer travels as plain shared memory and the client itself refuses an image format."""
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(OLD_SERVER.format('tests.test_hardware_buffer:ImageDevice'))}"
    compilation, device = served(f"remote:{command}")
    try:
        assert device.connection.version == 2
        np.testing.assert_array_equal(add_in_a_blob_buffer(compilation), A + B)
        error = failure_of(add_with_image_input, compilation)
        assert error.code == ResultCode.OP_FAILED and "protocol version 2" in error.message
    finally:
        device.close()


def test_a_client_of_the_older_protocol_is_served_in_it(monkeypatch):
    monkeypatch.setattr(wire, "VERSION", 2)
    compilation, device = served("remote:nnts serve tests.test_hardware_buffer:ImageDevice")
    try:
        assert device.connection.version == 2
        np.testing.assert_array_equal(add_in_a_blob_buffer(compilation), A + B)
        assert failure_of(add_with_image_input, compilation).code == ResultCode.OP_FAILED
    finally:
        device.close()
