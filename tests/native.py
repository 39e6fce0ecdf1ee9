"""Building native drivers on the nnts-driver SDK (nnts/sdk) with the system compiler, for tests.

The SDK's sources are compiled once per folder and linked with each driver; every build uses
-Wall -Wextra -Werror, as the SDK promises to build warning-free."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from nnts.cli.sdk import SDK, SOURCES

ROOT = Path(__file__).resolve().parents[1]
C_EXAMPLE = ROOT / "examples" / "c_driver" / "nnts_example_driver.c"
CPP_EXAMPLE = ROOT / "examples" / "cpp_driver" / "example_driver.cpp"
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


def _which(*names: str | None) -> str | None:
    for name in names:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compilers() -> tuple[str, str] | None:
    """(C compiler, C++ compiler) on PATH, or None when either is missing."""
    cc = _which(os.environ.get("CC"), "cc", "gcc", "clang")
    cxx = _which(os.environ.get("CXX"), "c++", "g++", "clang++")
    return (cc, cxx) if cc and cxx else None


def missing_compiler_reason() -> str:
    return "no C and C++ compiler (cc and c++, gcc and g++, or clang and clang++) on PATH: no native driver to build"


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command[:3])} ... failed:\n{done.stderr[-4000:]}"


def sdk_objects(folder: Path, extra: list[str] | None = None) -> list[Path]:
    """The SDK compiled into folder (once: later calls reuse the objects)."""
    _, cxx = compilers()
    objects = []
    for name in SOURCES:
        obj = folder / (Path(name).stem + ".o")
        if not obj.exists():
            _run([cxx, "-std=c++17", "-O2", *WARNINGS, *(extra or []), f"-I{SDK / 'include'}", "-c",
                  str(SDK / "src" / name), "-o", str(obj)])
        objects.append(obj)
    return objects


def build(source: Path, folder: Path, name: str, extra: list[str] | None = None) -> Path:
    """A driver from one C or C++ source file, linked with the SDK; the binary's path."""
    cc, cxx = compilers()
    objects = sdk_objects(folder, extra)
    binary = folder / name
    if source.suffix == ".c":
        obj = folder / (name + ".o")
        _run([cc, "-std=c11", "-O2", *WARNINGS, *(extra or []), f"-I{SDK / 'include'}", "-c", str(source), "-o",
              str(obj)])
        _run([cxx, *(extra or []), "-o", str(binary), str(obj), *map(str, objects), "-lpthread", "-lm"])
    else:
        _run([cxx, "-std=c++17", "-O2", *WARNINGS, *(extra or []), f"-I{SDK / 'include'}", "-o", str(binary),
              str(source), *map(str, objects), "-lpthread"])
    return binary
