"""``nnts sdk``: where the native driver SDK's headers and sources are, for a C/C++ build.

The SDK (nnts-driver, C++17 with a C ABI) ships with nnts as sources and headers; a driver
builds it with its own compiler: ``c++ -std=c++17 $(nnts sdk --cflags) my_driver.cpp $(nnts sdk
--sources) -lpthread``. Paths are printed shell-quoted, one line per option given."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[1] / "sdk"
SOURCES = ("server.cpp", "transport.cpp", "c_driver.cpp")


def register(sub) -> None:
    p = sub.add_parser("sdk", help="paths of the native driver SDK (C/C++): headers, sources, flags, CMake, pkg-config")
    p.add_argument("--include", action="store_true", help="the include folder (nnts/driver.h, nnts/driver.hpp)")
    p.add_argument("--sources", action="store_true", help="the C++ sources to compile with the driver")
    p.add_argument("--cflags", action="store_true", help="compiler flags: -I the include folder")
    p.add_argument("--cmake-dir", action="store_true", help="the folder of nnts-driverConfig.cmake (find_package PATHS)")
    p.add_argument("--pkg-config-dir", action="store_true", help="the folder of nnts-driver.pc (PKG_CONFIG_PATH)")
    p.set_defaults(func=run)


def run(args) -> int:
    lines = []
    if args.include:
        lines.append(shlex.quote(str(SDK / "include")))
    if args.sources:
        lines.append(" ".join(shlex.quote(str(SDK / "src" / name)) for name in SOURCES))
    if args.cflags:
        lines.append("-I" + shlex.quote(str(SDK / "include")))
    if args.cmake_dir:
        lines.append(shlex.quote(str(SDK / "cmake")))
    if args.pkg_config_dir:
        lines.append(shlex.quote(str(SDK / "pkgconfig")))
    if not lines:
        print("nnts sdk: give one or more of --include, --sources, --cflags, --cmake-dir, --pkg-config-dir",
              file=sys.stderr)
        return 2
    missing = [p for p in [SDK / "include" / "nnts" / "driver.h"] + [SDK / "src" / n for n in SOURCES] if not p.exists()]
    if missing:
        print(f"nnts sdk: the SDK is not installed with this nnts (missing {missing[0]})", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
