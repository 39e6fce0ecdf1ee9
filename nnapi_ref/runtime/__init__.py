"""The NNAPI runtime: model builder, compilation (partitioning), execution, memory, hardware buffers, devices."""
from nnapi_ref.runtime.compilation import Burst, Compilation
from nnapi_ref.runtime.devices import (Device, Partitioning, get_default_loop_timeout, get_devices,
                                       get_maximum_loop_timeout, get_runtime_feature_level, set_drivers, using_drivers)
from nnapi_ref.runtime.execution import UINT64_MAX, Event, Execution
from nnapi_ref.runtime.hardware_buffer import (AHardwareBuffer, HardwareBufferDesc, HardwareBufferFormat,
                                               HardwareBufferUsage)
from nnapi_ref.runtime.memory import Memory, MemoryDesc
from nnapi_ref.runtime.model import Model, OperandType

__all__ = ["AHardwareBuffer", "Burst", "Compilation", "Device", "Event", "Execution", "HardwareBufferDesc",
           "HardwareBufferFormat", "HardwareBufferUsage", "Memory", "MemoryDesc", "Model", "OperandType",
           "Partitioning", "UINT64_MAX", "get_default_loop_timeout", "get_devices", "get_maximum_loop_timeout",
           "get_runtime_feature_level", "set_drivers", "using_drivers"]
