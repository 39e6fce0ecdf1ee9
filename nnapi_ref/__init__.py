"""nnapi_ref: a complete reference of the Android Neural Networks API in numpy.

The NDK's programming model (:mod:`nnapi_ref.runtime`), the driver interface
(:mod:`nnapi_ref.hal`) and the ``nnapi-reference`` CPU driver (:mod:`nnapi_ref.drivers`)::

    from nnapi_ref import Model, Compilation, Execution, OperandType, OperandCode as T
"""
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import (UINT64_MAX, AHardwareBuffer, Burst, Compilation, Device, Event, Execution,
                               HardwareBufferDesc, HardwareBufferFormat, HardwareBufferUsage, Memory, MemoryDesc, Model,
                               OperandType, Partitioning, get_default_loop_timeout, get_devices,
                               get_maximum_loop_timeout, get_runtime_feature_level, set_drivers, using_drivers)
from nnapi_ref.types import (DeviceTypeCode, DurationCode, FeatureLevel, FuseCode, OperandCode, OperationCode,
                             PaddingCode, PreferenceCode, PriorityCode, ResultCode)

__all__ = ["AHardwareBuffer", "Burst", "Compilation", "Device", "DeviceTypeCode", "DurationCode", "Event", "Execution",
           "FeatureLevel", "FuseCode", "HardwareBufferDesc", "HardwareBufferFormat", "HardwareBufferUsage", "Memory",
           "MemoryDesc", "Model", "NnapiError", "OperandCode", "OperandType", "OperationCode", "PaddingCode",
           "Partitioning", "PreferenceCode", "PriorityCode", "ResultCode", "UINT64_MAX", "get_default_loop_timeout",
           "get_devices", "get_maximum_loop_timeout", "get_runtime_feature_level", "set_drivers", "using_drivers"]
