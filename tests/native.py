"""Building native drivers on the nnts-driver SDK (nnts/sdk) with the system compiler, for tests.

The SDK's sources are compiled once per pytest run (shared by every xdist worker) and linked with
each driver; every build uses -Wall -Wextra -Werror, as the SDK promises to build warning-free."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from nnts.cli.aosp_driver import sdk_digest
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


def objects_folder(tmp_path_factory) -> Path:
    """Where this pytest run keeps the SDK's object files: a folder under pytest's per-user temporary
    root shared by the run's xdist workers (never a shared /tmp path another user could plant)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    folder = shared / "nnts-sdk-objects"
    folder.mkdir(exist_ok=True)
    return folder


def _key(command: list[str], source: Path, headers: str) -> str:
    """What an object depends on: the compiler and its flags, the source and the SDK's headers
    (``headers``: their digest)."""
    return hashlib.sha256("\0".join([*command, headers]).encode() + source.read_bytes()).hexdigest()[:20]


def sdk_objects(cache: Path, extra: list[str] | None = None) -> list[Path]:
    """The SDK compiled into cache, once per compiler, flags and contents: later calls, in any
    xdist worker, reuse the objects. A worker compiles holding the folder's lock (another waits
    rather than compiling the same again) and renames each object into place whole."""
    _, cxx = compilers()
    headers = sdk_digest()
    objects = []
    with open(cache / "compiling.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in SOURCES:
            source = SDK / "src" / name
            command = [cxx, "-std=c++17", "-O2", *WARNINGS, *(extra or []), f"-I{SDK / 'include'}", "-c", str(source)]
            obj = cache / f"{Path(name).stem}-{_key(command, source, headers)}.o"
            if not obj.exists():
                partial = cache / f"{obj.stem}.{os.getpid()}.tmp.o"
                _run([*command, "-o", str(partial)])
                os.replace(partial, obj)
            objects.append(obj)
    return objects


def build(source: Path, folder: Path, name: str, cache: Path, extra: list[str] | None = None) -> Path:
    """A driver from one C or C++ source file, linked with the SDK (its objects from cache, see
    objects_folder); the binary's path."""
    cc, cxx = compilers()
    objects = sdk_objects(cache, extra)
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
