"""Memory (ANeuralNetworksMemory) and memory descriptors (ANeuralNetworksMemoryDesc).

The kinds of the NDK: shared memory over a caller's buffer (ashmem-like), memory mapped from a
file descriptor, memory over an AHardwareBuffer, and memory allocated from a descriptor whose
input/output roles let a driver keep it in its own memory domain.
"""
from __future__ import annotations

import math
import mmap
import weakref
from typing import Sequence

import numpy as np

from nnapi_ref import hal
from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.remote import shm
from nnapi_ref.runtime.devices import MANAGER
from nnapi_ref.runtime.hardware_buffer import AHardwareBuffer
from nnapi_ref.types import SCALAR_TYPES, ResultCode, combine_dimensions

PROT_READ, PROT_WRITE = mmap.PROT_READ, mmap.PROT_WRITE
BAD_STATE = ResultCode.BAD_STATE


class Memory:
    """A memory region usable for constants, inputs and outputs. Create it with one of the
    class methods."""

    def __init__(self, shared: hal.SharedMemory | None = None):
        self.shared = shared
        # Device memory (memory domains):
        self.desc: MemoryDesc | None = None
        self.device = None              # runtime Device owning ``buffer``
        self.buffer: hal.Buffer | None = None
        self.token = 0
        self.initialized = True
        self.dimensions: tuple[int, ...] = ()
        self._mmap = None
        self._bursts: weakref.WeakSet = weakref.WeakSet()  # bursts that gave it a token

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def from_buffer(cls, buffer) -> "Memory":
        """Shared memory over a writable buffer (numpy array, bytearray, mmap): no copy."""
        if buffer is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Memory.from_buffer: buffer is None")
        view = buffer.reshape(-1).view(np.uint8) if isinstance(buffer, np.ndarray) \
            else np.frombuffer(memoryview(buffer).cast("B"), np.uint8)
        return cls(hal.SharedMemory(view))

    @classmethod
    def create_shared(cls, size: int) -> "Memory":
        """A new zero-filled shared memory of ``size`` bytes (ASharedMemory_create): a region
        under /dev/shm, so that a driver in another process maps it instead of copying it."""
        check(size > 0, f"shared memory size {size} must be positive")
        try:
            try:
                buffer = shm.allocate(size, MANAGER.shm_dir)
            except (OSError, HostResourceError):  # no room in /dev/shm, or none: plain memory, copied for remote drivers
                buffer = np.zeros(size, np.uint8)
            return cls(hal.SharedMemory(buffer))
        except MemoryError:
            raise NnapiError(ResultCode.OUT_OF_MEMORY, f"cannot allocate {size} bytes of shared memory") from None

    @classmethod
    def from_fd(cls, size: int, protect: int, fd: int, offset: int) -> "Memory":
        """ANeuralNetworksMemory_createFromFd: map ``size`` bytes of ``fd`` from ``offset``."""
        check(size > 0, f"Memory.from_fd: size {size} must be positive")
        check(offset >= 0 and offset % mmap.ALLOCATIONGRANULARITY == 0,
              f"Memory.from_fd: offset {offset} must be a multiple of the page size {mmap.ALLOCATIONGRANULARITY}")
        check(protect & (PROT_READ | PROT_WRITE) and not protect & ~(PROT_READ | PROT_WRITE),
              f"Memory.from_fd: protection {protect} must be PROT_READ and/or PROT_WRITE")
        access = mmap.ACCESS_WRITE if protect & PROT_WRITE else mmap.ACCESS_READ
        try:
            mapped = mmap.mmap(fd, size, access=access, offset=offset)
        except (OSError, ValueError, OverflowError) as e:
            raise NnapiError(ResultCode.UNMAPPABLE, f"Memory.from_fd: cannot map fd {fd}: {e}") from None
        memory = cls(hal.SharedMemory(np.frombuffer(mapped, np.uint8), "mmap_fd"))
        memory._mmap = mapped
        return memory

    @classmethod
    def from_ahardware_buffer(cls, buffer: AHardwareBuffer) -> "Memory":
        """ANeuralNetworksMemory_createFromAHardwareBuffer. A BLOB buffer is used as any shared
        memory; one of an image format only whole, as a model input or output (offset and length
        0), never for a constant, and only by devices that can consume it."""
        if buffer is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Memory.from_ahardware_buffer: buffer is None")
        check(isinstance(buffer, AHardwareBuffer),
              f"Memory.from_ahardware_buffer: a {type(buffer).__name__} is not an AHardwareBuffer")
        desc = buffer.describe()
        kind = hal.HARDWARE_BUFFER_BLOB if desc.is_blob else hal.HARDWARE_BUFFER
        return cls(hal.SharedMemory(buffer.data, kind, desc))

    @property
    def is_image_buffer(self) -> bool:
        """Over a hardware buffer of an image format: bound only whole, as an input or output."""
        return self.shared is not None and self.shared.kind == hal.HARDWARE_BUFFER

    @classmethod
    def from_desc(cls, desc: "MemoryDesc") -> "Memory":
        """ANeuralNetworksMemory_createFromDesc: memory for the roles in ``desc``, in a driver's
        memory domain when all roles are on one device that can allocate it."""
        if desc is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Memory.from_desc: desc is None")
        check(desc.finished, "Memory.from_desc: the descriptor is not finished", BAD_STATE)
        memory = cls()
        memory.desc = desc
        memory.dimensions = desc.dimensions
        memory.initialized = False
        devices = {id(d): d for d in desc.devices()}
        if len(devices) == 1:
            device = next(iter(devices.values()))
            prepared, in_roles, out_roles = desc.hal_roles()
            try:
                memory.buffer, memory.token = device.driver.allocate(hal.BufferDesc(desc.dimensions), prepared,
                                                                     in_roles, out_roles)
                memory.device = device
                return memory
            except hal.HalError:
                pass  # fall back to runtime-allocated memory
        dims = desc.dimensions
        # A scalar role (RANK's output) has no dimensions and its type's size, as AOSP's runtime
        # sizes it (TypeManager::getSizeOfData of a scalar type).
        scalar = desc.operand is not None and desc.operand.type in SCALAR_TYPES
        check(scalar or (dims and 0 not in dims), "Memory.from_desc: the dimensions are not fully specified "
              "and no driver could allocate the memory", ResultCode.OP_FAILED)
        size = math.prod(dims) * desc.dtype.itemsize
        memory.shared = hal.SharedMemory(np.zeros(size, np.uint8))
        return memory

    # -- use -----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.shared.size if self.shared is not None else 0

    def shared_region(self, call: str) -> hal.SharedMemory:
        """The shared memory behind this Memory; BAD_DATA for device memory and for a hardware
        buffer of an image format."""
        check(self.desc is None, f"{call}: memory created from a descriptor cannot be used here")
        check(not self.is_image_buffer,
              f"{call}: memory over a hardware buffer of a format other than BLOB cannot be used here")
        return self.shared

    @staticmethod
    def copy(src: "Memory", dst: "Memory") -> None:
        """ANeuralNetworksMemory_copy: copy the content of ``src`` to ``dst``."""
        if src is None or dst is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Memory.copy: memory is None")
        check(src.initialized, "Memory.copy: the source memory is not initialized")
        if src.buffer is not None:
            staging = hal.SharedMemory(np.zeros(src._byte_size(), np.uint8))
            try:
                src.buffer.copy_to(staging)
            except hal.HalError as e:
                raise NnapiError(ResultCode.OP_FAILED, f"Memory.copy: {e.message}") from None
        else:
            staging = src.shared
        if dst.buffer is not None:
            dims = src.dimensions or dst.dimensions
            try:
                dst.buffer.copy_from(staging, dims)
            except hal.HalError as e:
                raise NnapiError(ResultCode.BAD_DATA, f"Memory.copy: {e.message}") from None
            dst.dimensions = tuple(dims)
        else:
            check(staging.size == dst.shared.size,
                  f"Memory.copy: source has {staging.size} bytes, destination {dst.shared.size}")
            dst.shared.buffer[:] = staging.buffer
            if dst.desc is not None:
                dst.dimensions = src.dimensions or dst.dimensions
        dst.initialized = True

    def _byte_size(self) -> int:
        return math.prod(self.dimensions) * self.desc.dtype.itemsize

    def seen_by(self, burst) -> None:
        """``burst`` executes on this memory: it is told when the memory is freed."""
        self._bursts.add(burst)

    def close(self) -> None:
        """ANeuralNetworksMemory_free: the bursts that used it release its token in their drivers."""
        for burst in list(self._bursts):
            burst.release(self.shared if self.buffer is None else self.token)
        self._bursts.clear()
        if self._mmap is not None:
            self.shared = None
            self._mmap = None


class MemoryDesc:
    """ANeuralNetworksMemoryDesc: which inputs/outputs of which compilations a memory serves."""

    def __init__(self):
        self.input_roles: list[tuple[object, int, float]] = []
        self.output_roles: list[tuple[object, int, float]] = []
        self.dimensions: tuple[int, ...] = ()
        self.operand = None
        self.dtype = None  # the roles' element type (an extension type's as its model declares it)
        self.finished = False

    def _add_role(self, compilation, index: int, frequency: float, is_input: bool) -> None:
        call = "add_input_role" if is_input else "add_output_role"
        check(not self.finished, f"MemoryDesc.{call}: the descriptor is finished", BAD_STATE)
        if compilation is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, f"MemoryDesc.{call}: compilation is None")
        check(compilation.finished, f"MemoryDesc.{call}: the compilation is not finished", BAD_STATE)
        model = compilation.model
        count = model.input_count if is_input else model.output_count
        check(0 <= index < count, f"MemoryDesc.{call}: index {index} out of range ({count})")
        check(0.0 < frequency <= 1.0, f"MemoryDesc.{call}: frequency {frequency} must be in (0, 1]")
        roles = self.input_roles if is_input else self.output_roles
        check(all(not (c is compilation and i == index) for c, i, _ in roles),
              f"MemoryDesc.{call}: role given twice")
        main = model.hal_model.main
        operand = main.operands[(main.input_indexes if is_input else main.output_indexes)[index]]
        if self.operand is not None:
            check((operand.type, operand.scale, operand.zero_point) ==
                  (self.operand.type, self.operand.scale, self.operand.zero_point),
                  f"MemoryDesc.{call}: the operand differs from the other roles' in type or quantization")
        self.operand = operand
        self.dtype = model.dtype_of(operand.type)
        dims = combine_dimensions(self.dimensions, operand.dimensions)
        check(dims is not None, f"MemoryDesc.{call}: dimensions {list(operand.dimensions)} conflict with "
                                f"{list(self.dimensions)}")
        self.dimensions = dims
        roles.append((compilation, index, frequency))

    def add_input_role(self, compilation, index: int, frequency: float = 1.0) -> None:
        self._add_role(compilation, index, frequency, True)

    def add_output_role(self, compilation, index: int, frequency: float = 1.0) -> None:
        self._add_role(compilation, index, frequency, False)

    def set_dimensions(self, dimensions: Sequence[int]) -> None:
        check(not self.finished, "MemoryDesc.set_dimensions: the descriptor is finished", BAD_STATE)
        check(dimensions is not None, "MemoryDesc.set_dimensions: dimensions is None", ResultCode.UNEXPECTED_NULL)
        dims = combine_dimensions(self.dimensions, tuple(dimensions))
        check(dims is not None, f"MemoryDesc.set_dimensions: {list(dimensions)} conflict with {list(self.dimensions)}")
        self.dimensions = dims

    def finish(self) -> None:
        check(not self.finished, "MemoryDesc.finish: called twice", BAD_STATE)
        check(self.input_roles or self.output_roles, "MemoryDesc.finish: no roles added")
        self.finished = True

    def devices(self) -> list:
        return [c.single_device for c, _, _ in self.input_roles + self.output_roles]

    def hal_roles(self):
        prepared, index_of = [], {}
        for c, _, _ in self.input_roles + self.output_roles:
            if id(c) not in index_of:
                index_of[id(c)] = len(prepared)
                prepared.append(c.single_prepared_model)
        ins = [hal.BufferRole(index_of[id(c)], i, f) for c, i, f in self.input_roles]
        outs = [hal.BufferRole(index_of[id(c)], i, f) for c, i, f in self.output_roles]
        return prepared, ins, outs

    def allows(self, compilation, index: int, is_input: bool) -> bool:
        roles = self.input_roles if is_input else self.output_roles
        return any(c is compilation and i == index for c, i, _ in roles)

