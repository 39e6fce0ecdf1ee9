"""AHardwareBuffer off-device: Android's buffer that the CPU, the GPU and accelerators share
without copies, as NNAPI's guides tell apps to hand inputs, outputs and constants to NNAPI.

The buffer lives in shared memory (as ASharedMemory_create's regions do), so a driver in another
process maps it. A BLOB buffer is plain bytes (``width`` of them); an image format holds
``width x height x layers`` pixels, tightly packed here (a stride of ``width``), which only a
device that understands the format can consume: NNAPI never reads one on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag

import numpy as np

from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.remote import shm
from nnapi_ref.runtime.devices import MANAGER
from nnapi_ref.types import ResultCode


class HardwareBufferFormat(IntEnum):
    """AHardwareBuffer_Format (android/hardware_buffer.h)."""

    R8G8B8A8_UNORM = 1
    R8G8B8X8_UNORM = 2
    R8G8B8_UNORM = 3
    R5G6B5_UNORM = 4
    R16G16B16A16_FLOAT = 0x16
    R10G10B10A2_UNORM = 0x2B
    BLOB = 0x21
    D16_UNORM = 0x30
    D24_UNORM = 0x31
    D32_FLOAT = 0x33
    S8_UINT = 0x35
    R8_UNORM = 0x38


BYTES_PER_PIXEL = {
    HardwareBufferFormat.R8G8B8A8_UNORM: 4, HardwareBufferFormat.R8G8B8X8_UNORM: 4,
    HardwareBufferFormat.R8G8B8_UNORM: 3, HardwareBufferFormat.R5G6B5_UNORM: 2,
    HardwareBufferFormat.R16G16B16A16_FLOAT: 8, HardwareBufferFormat.R10G10B10A2_UNORM: 4,
    HardwareBufferFormat.BLOB: 1, HardwareBufferFormat.D16_UNORM: 2, HardwareBufferFormat.D24_UNORM: 4,
    HardwareBufferFormat.D32_FLOAT: 4, HardwareBufferFormat.S8_UINT: 1, HardwareBufferFormat.R8_UNORM: 1,
}


class HardwareBufferUsage(IntFlag):
    """AHardwareBuffer_UsageFlags that matter to NNAPI (android/hardware_buffer.h)."""

    CPU_READ_RARELY = 2
    CPU_READ_OFTEN = 3
    CPU_WRITE_RARELY = 2 << 4
    CPU_WRITE_OFTEN = 3 << 4
    GPU_SAMPLED_IMAGE = 1 << 8
    GPU_FRAMEBUFFER = 1 << 9
    GPU_DATA_BUFFER = 1 << 24
    SENSOR_DIRECT_DATA = 1 << 23


@dataclass(frozen=True)
class HardwareBufferDesc:
    """AHardwareBuffer_Desc: ``width`` is the size in bytes of a BLOB buffer."""

    width: int
    height: int = 1
    layers: int = 1
    format: int = HardwareBufferFormat.BLOB
    usage: int = HardwareBufferUsage.CPU_READ_OFTEN | HardwareBufferUsage.CPU_WRITE_OFTEN
    stride: int = 0  # in pixels; set by allocate

    @property
    def is_blob(self) -> bool:
        return self.format == HardwareBufferFormat.BLOB

    @property
    def size(self) -> int:
        """Bytes of the tightly packed buffer."""
        return self.width * self.height * self.layers * BYTES_PER_PIXEL[HardwareBufferFormat(self.format)]


class AHardwareBuffer:
    """A hardware buffer: ``AHardwareBuffer.allocate(desc)``, its ``data`` (the CPU's view, as
    AHardwareBuffer_lock gives it) and ``describe()``."""

    def __init__(self, desc: HardwareBufferDesc, data: np.ndarray):
        self._desc = desc
        self.data = data

    @classmethod
    def allocate(cls, desc: HardwareBufferDesc) -> AHardwareBuffer:
        """AHardwareBuffer_allocate, with its rules: positive sizes, a known format, a BLOB one
        row of one layer."""
        if desc is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "AHardwareBuffer.allocate: desc is None")
        check(all(isinstance(v, int) and v > 0 for v in (desc.width, desc.height, desc.layers)),
              f"AHardwareBuffer.allocate: width, height and layers must be positive, got {desc.width}x{desc.height}"
              f"x{desc.layers}")
        check(desc.format in BYTES_PER_PIXEL, f"AHardwareBuffer.allocate: unknown format {desc.format}")
        if desc.format == HardwareBufferFormat.BLOB:
            check(desc.height == 1 and desc.layers == 1,
                  f"AHardwareBuffer.allocate: a BLOB buffer has height 1 and 1 layer, got {desc.height}x{desc.layers}")
        described = HardwareBufferDesc(desc.width, desc.height, desc.layers, desc.format, desc.usage, desc.width)
        try:
            try:
                data = shm.allocate(described.size, MANAGER.shm_dir)
            except (OSError, HostResourceError):  # no /dev/shm: plain memory, copied for remote drivers
                data = np.zeros(described.size, np.uint8)
        except MemoryError:
            raise NnapiError(ResultCode.OUT_OF_MEMORY, f"AHardwareBuffer.allocate: cannot allocate "
                                                       f"{described.size} bytes") from None
        return cls(described, data)

    def describe(self) -> HardwareBufferDesc:
        """AHardwareBuffer_describe."""
        return self._desc
