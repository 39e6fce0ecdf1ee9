"""Device discovery (ANeuralNetworksDevice) and the runtime's device manager.

The manager holds the drivers the runtime may use (the reference driver unless set otherwise)
and a hidden CPU reference device used for CPU fallback, as NNAPI's runtime does.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from enum import IntEnum
from typing import Iterator, Sequence

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.remote import shm
from nnapi_ref.types import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, DeviceTypeCode, FeatureLevel, ResultCode

RUNTIME_FEATURE_LEVEL = FeatureLevel.LEVEL_7
"""The feature level this runtime implements (ANeuralNetworks_getRuntimeFeatureLevel)."""

MIN_MEMORY_ALIGNMENT, MIN_MEMORY_PADDING = 16, 1
"""AOSP's kMinMemoryAlignment (alignof(std::max_align_t) on 64-bit) and kMinMemoryPadding: what the
runtime's own CPU device asks of request buffers."""
DRIVER_MEMORY_ALIGNMENT, DRIVER_MEMORY_PADDING = 64, 64
"""AOSP's kDefaultRequestMemoryAlignment and kDefaultRequestMemoryPadding: what the runtime asks of
request buffers for a driver's device, which may map them for an accelerator."""


class Partitioning(IntEnum):
    """Like AOSP's debug.nn.partition property (given to :func:`set_drivers`; nnts's entry points
    read ``NNTS_PARTITION``)."""

    NONE = 0           # no partitioning: the whole model runs on the CPU reference device
    WITH_FALLBACK = 1  # partition; fall back to the CPU when a driver fails (the default)
    WITHOUT_FALLBACK = 2


class Device:
    """ANeuralNetworksDevice: one driver as the application sees it."""

    def __init__(self, driver: hal.Device):
        self.driver = driver
        self.name = driver.get_name()
        self.version = driver.get_version_string()
        self.type = DeviceTypeCode(driver.get_type())
        self.feature_level = int(driver.get_feature_level())
        self.capabilities = driver.get_capabilities()
        self.extensions = list(driver.get_supported_extensions())

    def get_extension_support(self, extension_name: str) -> bool:
        """ANeuralNetworksDevice_getExtensionSupport: whether the device supports the named extension."""
        if extension_name is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "get_extension_support: extension name is None")
        return any(e.name == extension_name for e in self.extensions)

    def wait(self) -> None:
        """ANeuralNetworksDevice_wait: the device is always live in-process."""

    @property
    def memory_preference(self) -> tuple[int, int]:
        """(alignment, padding) in bytes this device prefers for request buffers, as AOSP's runtime
        derives them: the minimum for the CPU reference device, the request defaults for a driver."""
        if isinstance(self.driver, ReferenceDevice) and self.name == "nnapi-reference":
            return MIN_MEMORY_ALIGNMENT, MIN_MEMORY_PADDING
        return DRIVER_MEMORY_ALIGNMENT, DRIVER_MEMORY_PADDING

    def __repr__(self) -> str:
        return f"Device({self.name!r}, {self.type.name}, feature level {self.feature_level})"


class DeviceManager:
    def __init__(self):
        self._lock = threading.Lock()
        self._devices: list[Device] | None = None
        self._cpu: Device | None = None
        self.partitioning = Partitioning.WITH_FALLBACK
        self.shm_dir = shm.DEFAULT_DIR  # where ASharedMemory_create's regions go

    def set_drivers(self, drivers: Sequence[hal.Device], partitioning: Partitioning | None = None,
                    shm_dir: str | None = None) -> None:
        names = [d.get_name() for d in drivers]
        if len(set(names)) != len(names):
            raise NnapiError(ResultCode.BAD_DATA, f"driver names must be unique, got {names}")
        with self._lock:
            self._devices = [Device(d) for d in drivers]
            if partitioning is not None:
                self.partitioning = Partitioning(partitioning)
            if shm_dir is not None:
                self.shm_dir = shm_dir

    @property
    def devices(self) -> list[Device]:
        with self._lock:
            if self._devices is None:  # nothing chosen: the reference, as a device has no other default
                self._devices = [Device(ReferenceDevice())]
            return list(self._devices)

    @property
    def cpu(self) -> Device:
        """The CPU reference device used for fallback: the listed one when it is there (in this
        process: a driver in another process may die, the fallback must not)."""
        for device in self.devices:
            if isinstance(device.driver, ReferenceDevice) and device.name == "nnapi-reference":
                return device
        with self._lock:
            if self._cpu is None:
                self._cpu = Device(ReferenceDevice())
            return self._cpu


MANAGER = DeviceManager()


def declared_extensions() -> list[hal.Extension]:
    """The extensions the runtime's devices declare, one per name. Devices that declare one
    extension's operand types differently disable it, as NNAPI's runtime does: the model
    builder could not size its operands."""
    seen: dict[str, hal.Extension] = {}
    disabled: set[str] = set()
    for device in MANAGER.devices:
        for extension in device.extensions:
            known = seen.setdefault(extension.name, extension)
            if sorted(known.operand_types, key=lambda i: i.type) != sorted(extension.operand_types,
                                                                             key=lambda i: i.type):
                disabled.add(extension.name)
    return [e for name, e in seen.items() if name not in disabled]


def extension_operand_info(name: str, type_within: int) -> hal.ExtensionOperandTypeInformation | None:
    """A device's declaration of operand type ``type_within`` of extension ``name`` (None if none has it)."""
    for extension in declared_extensions():
        if extension.name == name:
            return next((info for info in extension.operand_types if info.type == type_within), None)
    return None


def get_runtime_feature_level() -> int:
    """ANeuralNetworks_getRuntimeFeatureLevel."""
    return int(RUNTIME_FEATURE_LEVEL)


def get_default_loop_timeout() -> int:
    """ANeuralNetworks_getDefaultLoopTimeout: a WHILE loop's time limit, in nanoseconds, when the
    execution sets none."""
    return LOOP_TIMEOUT_DEFAULT_NS


def get_maximum_loop_timeout() -> int:
    """ANeuralNetworks_getMaximumLoopTimeout: the most ANeuralNetworksExecution_setLoopTimeout may set."""
    return LOOP_TIMEOUT_MAXIMUM_NS


def get_devices() -> list[Device]:
    """ANeuralNetworks_getDeviceCount / getDevice: the devices the runtime knows."""
    return MANAGER.devices


def set_drivers(drivers: Sequence[hal.Device], partitioning: Partitioning | None = None,
                shm_dir: str | None = None) -> None:
    """Replace the drivers the runtime uses (the suite's ``--driver``) and, when given, how it
    partitions a model over them and where its shared memory goes: whoever chooses the drivers
    chooses these too (None keeps the current setting)."""
    MANAGER.set_drivers(drivers, partitioning, shm_dir)


@contextmanager
def drivers_restored() -> Iterator[None]:
    """Whatever drivers (and partitioning, shared-memory folder) the block sets, the previous ones afterwards: an
    ``nnts`` command run in process must not leave its ``--driver`` behind for its caller."""
    previous = MANAGER._devices, MANAGER.partitioning, MANAGER.shm_dir
    try:
        yield
    finally:
        MANAGER._devices, MANAGER.partitioning, MANAGER.shm_dir = previous


@contextmanager
def using_drivers(drivers: Sequence[hal.Device], partitioning: Partitioning | None = None) -> Iterator[list[Device]]:
    """Temporarily use ``drivers`` (and a partitioning setting); restores the previous ones."""
    with drivers_restored():
        MANAGER.set_drivers(drivers)
        if partitioning is not None:
            MANAGER.partitioning = partitioning
        yield MANAGER.devices
