"""The NNAPI runtime: model builder, compilation (partitioning), execution, memory, devices."""
from nnapi_ref.runtime.compilation import Burst, Compilation
from nnapi_ref.runtime.devices import Device, Partitioning, get_devices, set_drivers, using_drivers
from nnapi_ref.runtime.execution import UINT64_MAX, Event, Execution
from nnapi_ref.runtime.memory import Memory, MemoryDesc
from nnapi_ref.runtime.model import Model, OperandType

__all__ = ["Burst", "Compilation", "Device", "Event", "Execution", "Memory", "MemoryDesc", "Model", "OperandType",
           "Partitioning", "UINT64_MAX", "get_devices", "set_drivers", "using_drivers"]
