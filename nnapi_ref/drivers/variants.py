"""Drivers derived from the reference driver, for testing the runtime and the suite itself:
a device that supports only some operations with a chosen performance (partitioning), one
whose calls fail with a chosen status (fallback and error reporting), and one whose bursts
cache memory mappings by token (memory identifier tokens).
"""
from __future__ import annotations

from typing import Iterable

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceBurst, ReferenceDevice, ReferencePreparedModel
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.types import FeatureLevel, OperationCode


class SubsetDevice(ReferenceDevice):
    """A reference driver that supports only ``operations`` (all if None), reporting
    ``performance`` (relative to the CPU: lower is faster) for every operand type."""

    def __init__(self, name: str, operations: Iterable[OperationCode] | None = None, performance: float = 1.0,
                 feature_level: int = FeatureLevel.LEVEL_7):
        super().__init__(name, feature_level, performance)
        self.operations = None if operations is None else {OperationCode(op) for op in operations}
        self.prepared_models: list[hal.Model] = []  # what this driver was asked to compile

    def get_version_string(self) -> str:
        return f"{self.name} 1.0"

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        flags = super().get_supported_operations(model)
        if self.operations is None:
            return flags
        return [f and op.type in self.operations for f, op in zip(flags, model.main.operations)]

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        if self.operations is not None:
            missing = {op.type for op in model.main.operations} - self.operations
            if missing:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{self.name} does not support "
                                                              f"{sorted(OperationCode(m).name for m in missing)}")
        self.prepared_models.append(model)
        return super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)


class FaultyDevice(SubsetDevice):
    """A driver whose prepare or execution fails with the given status (None: works)."""

    def __init__(self, name: str = "faulty", operations=None, performance: float = 0.5,
                 fail_prepare: ErrorStatus | None = None, fail_execute: ErrorStatus | None = None):
        super().__init__(name, operations, performance)
        self.fail_prepare = fail_prepare
        self.fail_execute = fail_execute
        self.executions = 0

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        if self.fail_prepare is not None:
            raise HalError(self.fail_prepare, f"{self.name}: injected prepare failure")
        prepared = super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        return _FaultyPreparedModel(self, prepared)


class _FaultyPreparedModel(ReferencePreparedModel):
    def __init__(self, device: FaultyDevice, prepared: ReferencePreparedModel):
        super().__init__(device, prepared.model, prepared.plans)

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        self.device.executions += 1
        if self.device.fail_execute is not None:
            raise HalError(self.device.fail_execute, f"{self.device.name}: injected execution failure")
        return super()._run(request, measure, deadline_ns, loop_timeout_ns)


class _TokenCachingBurst(ReferenceBurst):
    """Maps each pool once, when its memory identifier token is first seen, and uses that
    mapping for the token until it is released (the HAL's burst memory cache)."""

    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared)
        self.mapped: dict[int, object] = {}

    def execute(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns):
        pools = [self.mapped.setdefault(token, pool) for pool, token in zip(request.pools, memory_identifier_tokens)]
        return super().execute(hal.Request(request.inputs, request.outputs, pools), memory_identifier_tokens,
                               measure, deadline_ns, loop_timeout_ns)

    def release_memory_resource(self, memory_identifier_token):
        self.mapped.pop(memory_identifier_token, None)


class _TokenCachingPreparedModel(ReferencePreparedModel):
    def configure_execution_burst(self):
        return _TokenCachingBurst(self)


class TokenCachingDevice(ReferenceDevice):
    """A correct driver whose bursts cache pool mappings by token: right only if the runtime
    gives one memory one token, and another memory another, for a burst's life."""

    def __init__(self, name: str = "nnts-token-caching"):
        super().__init__(name)

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        prepared = super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        return _TokenCachingPreparedModel(self, prepared.model, prepared.plans)
