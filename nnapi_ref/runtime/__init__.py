"""The NNAPI runtime: model builder, compilation (partitioning), execution, memory, devices."""
from .compilation import Burst, Compilation
from .devices import Device, Partitioning, get_devices, set_drivers, using_drivers
from .execution import UINT64_MAX, Event, Execution
from .memory import Memory, MemoryDesc
from .model import Model, OperandType

__all__ = ["Burst", "Compilation", "Device", "Event", "Execution", "Memory", "MemoryDesc", "Model", "OperandType",
           "Partitioning", "UINT64_MAX", "get_devices", "set_drivers", "using_drivers"]
