"""VTS basic tests: what a driver says about itself (AOSP's BasicTests): capabilities, type,
version string, feature level, cache file counts and extensions are well formed.
"""
from __future__ import annotations

import math

import pytest

from nnapi_ref import hal
from nnapi_ref.types import MAX_NUMBER_OF_CACHE_FILES, DeviceTypeCode, FeatureLevel, OperandCode

pytestmark = pytest.mark.vts


def _check_performance(info, what: str) -> None:
    assert isinstance(info, hal.PerformanceInfo), f"{what}: {info!r} is not a PerformanceInfo"
    for name in ("exec_time", "power_usage"):
        value = getattr(info, name)
        assert isinstance(value, (int, float)) and not math.isnan(value) and value > 0, \
            f"{what}.{name} is {value!r}; performance values must be positive"


def test_capabilities(driver):
    caps = driver.get_capabilities()
    assert isinstance(caps, hal.Capabilities), f"get_capabilities returned {type(caps).__name__}"
    _check_performance(caps.relaxed_float32_to_float16_performance_scalar, "relaxed scalar performance")
    _check_performance(caps.relaxed_float32_to_float16_performance_tensor, "relaxed tensor performance")
    _check_performance(caps.if_performance, "IF performance")
    _check_performance(caps.while_performance, "WHILE performance")
    codes = []
    for entry in caps.operand_performance:
        assert len(entry) == 2, f"operand_performance entry {entry!r} is not (operand type, performance)"
        code, info = entry
        codes.append(int(code))
        _check_performance(info, f"operand_performance[{code!r}]")
    assert codes == sorted(codes), f"operand_performance is not sorted by operand type: {codes}"
    assert len(set(codes)) == len(codes), f"operand_performance lists a type twice: {codes}"
    assert int(OperandCode.SUBGRAPH) not in codes, "operand_performance must have no SUBGRAPH entry"


def test_device_type(driver):
    t = driver.get_type()
    assert t in (DeviceTypeCode.OTHER, DeviceTypeCode.CPU, DeviceTypeCode.GPU, DeviceTypeCode.ACCELERATOR), \
        f"get_type returned {t!r}; a driver is OTHER, CPU, GPU or ACCELERATOR"


def test_version_string(driver):
    version = driver.get_version_string()
    assert isinstance(version, str) and version.strip(), f"get_version_string returned {version!r}"


def test_name(driver):
    name = driver.get_name()
    assert isinstance(name, str) and name.strip(), f"get_name returned {name!r}"


def test_feature_level(driver):
    level = driver.get_feature_level()
    assert level in {int(v) for v in FeatureLevel}, \
        f"get_feature_level returned {level!r}, not one of {sorted(int(v) for v in FeatureLevel)}"


def test_number_of_cache_files_needed(driver):
    counts = driver.get_number_of_cache_files_needed()
    assert len(counts) == 2, f"get_number_of_cache_files_needed returned {counts!r}, expected (model, data)"
    for what, n in zip(("model", "data"), counts):
        assert isinstance(n, int) and 0 <= n <= MAX_NUMBER_OF_CACHE_FILES, \
            f"{what} cache files needed: {n!r}, must be within 0..{MAX_NUMBER_OF_CACHE_FILES}"


def test_extensions(driver):
    extensions = driver.get_supported_extensions()
    names = []
    for ext in extensions:
        assert isinstance(ext, hal.Extension), f"{ext!r} is not an Extension"
        # AOSP: a reverse-domain name with at least one dot, no empty parts.
        assert isinstance(ext.name, str) and "." in ext.name and all(ext.name.split(".")), \
            f"extension name {ext.name!r} is not a reverse-domain name"
        names.append(ext.name)
        for operand_type in ext.operand_types:
            assert operand_type is not None, f"extension {ext.name}: a None operand type"
    assert len(set(names)) == len(names), f"an extension is listed twice: {names}"


def test_capabilities_stable(driver):
    """The same answers on every call (the runtime caches them)."""
    assert driver.get_capabilities() == driver.get_capabilities()
    assert driver.get_feature_level() == driver.get_feature_level()
    assert driver.get_type() == driver.get_type()
