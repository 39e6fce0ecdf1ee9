"""``nnts devices``: the devices a driver string gives, with their capabilities."""
from __future__ import annotations

from nnapi_ref.types import OperandCode
from nnts.cli.common import add_driver_options
from nnts.runners.drivers import runtime_devices


def register(sub) -> None:
    p = sub.add_parser("devices", help="list the devices and their capabilities")
    add_driver_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    for device in runtime_devices(args.driver, args.isolate, args.settings):
        caps = device.capabilities
        print(f"{device.name}: type {device.type.name}, feature level {device.feature_level}, "
              f"version {device.version!r}")
        print(f"  cache files: {device.driver.get_number_of_cache_files_needed()}")
        for extension in device.extensions:
            types = ", ".join(f"{i.type} ({'tensor' if i.is_tensor else 'scalar'}, {i.byte_size} bytes)"
                              for i in extension.operand_types)
            print(f"  extension {extension.name}: operand types {types or 'none'}")
        relaxed = caps.relaxed_float32_to_float16_performance_tensor
        print(f"  relaxed float32->float16 tensor: exec {relaxed.exec_time:g}, power {relaxed.power_usage:g}")
        print(f"  IF: exec {caps.if_performance.exec_time:g}; WHILE: exec {caps.while_performance.exec_time:g}")
        for code, info in caps.operand_performance:
            name = OperandCode(code).name if code != 15 else "SUBGRAPH"
            print(f"  {name:32s} exec {info.exec_time:g}, power {info.power_usage:g}")
    return 0
