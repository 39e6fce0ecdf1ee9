"""``nnts aosp-driver build CHECKOUT --out DIR``: AOSP's own CPU executor as a driver nnts tests.

AOSP's NNAPI module (``packages/modules/NeuralNetworks``: ``common/CpuExecutor.cpp``, the
operations of ``common/cpu_operations/``, the canonical types and ``nn::validate`` of
``common/types/``) is compiled with the system compiler from a checkout the user names, together
with nnts's glue (``nnts/sdk/aosp/aosp_cpu_driver.cpp``: the native SDK's driver interface over
AOSP's canonical model and request) and the SDK's server, into ``DIR/aosp-cpu-driver``, which runs
as ``--driver remote:DIR/aosp-cpu-driver``. Nothing of AOSP is in nnts.

CHECKOUT is laid out as ``../shared/aosp-native`` is (its README): ``neuralnetworks/`` (the
module), ``litert/tflite/`` (the TFLite kernels AOSP includes as ``tensorflow/lite``), ``ruy/``,
``libbase/`` and ``flatbuffers/include``; Eigen, gemmlowp, Abseil and liblog come from Debian's
packages (``g++ libeigen3-dev libgemmlowp-dev libabsl-dev android-liblog-dev``).

The build compiles in parallel (``-j``, the CPU count by default) and keeps each object file under
``DIR/obj`` named by a hash of what made it (the source's bytes, every header of the checkout, the
flags and the compiler's version), so a second build into the same folder compiles only what
changed. An operation whose source file does not compile is left out with its reason: the driver
reports it unsupported (``DIR/aosp-cpu-driver.json`` lists the operations built and not built).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nnts.runners.settings import Settings

GLUE = Path(__file__).resolve().parents[1] / "sdk" / "aosp"
SDK = Path(__file__).resolve().parents[1] / "sdk"
SDK_SOURCES = ("server.cpp", "transport.cpp", "c_driver.cpp")
BINARY = "aosp-cpu-driver"
OPTIMIZATION = "-O1"  # measured: see docs/aosp-driver.md (compile time against execution time)

# What a checkout must hold (relative path, what it is).
LAYOUT = (
    ("neuralnetworks/common/CpuExecutor.cpp", "AOSP's NNAPI module (packages/modules/NeuralNetworks)"),
    ("litert/tflite/kernels/internal/types.h", "the TFLite kernels (LiteRT's tflite/)"),
    ("ruy/ruy/ruy.h", "ruy"),
    ("libbase/include/android-base/logging.h", "Android's libbase"),
    ("flatbuffers/include/flatbuffers/flatbuffers.h", "FlatBuffers' headers"),
)
# What the system must hold (path, Debian package).
PACKAGES = (
    ("/usr/include/eigen3/Eigen/Core", "libeigen3-dev"),
    ("/usr/include/gemmlowp/fixedpoint/fixedpoint.h", "libgemmlowp-dev"),
    ("/usr/include/absl/strings/str_cat.h", "libabsl-dev"),
    ("/usr/include/android/android/log.h", "android-liblog-dev"),
)

# The module's own sources the executor links with (relative to neuralnetworks/common).
COMMON = ("CpuExecutor.cpp", "OperationResolver.cpp", "LegacyUtils.cpp", "OperationsExecutionUtils.cpp",
          "ActivationFunctor.cpp", "IndexedShapeWrapper.cpp", "QuantUtils.cpp")
TYPES_SKIPPED: dict[str, str] = {}
# Operation files CpuExecutor calls directly (no registration): the operation each serves and the
# stand-in the glue has for it when the file does not build (None: the build cannot go on).
EXECUTOR_FILES = {"LSHProjection.cpp": ("LSH_PROJECTION", "unbuilt_lsh_projection.cpp"),
                  "Multinomial.cpp": ("RANDOM_MULTINOMIAL", "unbuilt_multinomial.cpp")}
# Operation files that link only with other sources of the module (relative to neuralnetworks/common):
# when one of those does not compile, the operation is not built either.
COMPANIONS = {"Multinomial.cpp": ("random/guarded_philox_random.cc", "random/random.cc", "random/simple_philox.cc")}
# The supporting sources of the other trees a link needs (relative to the checkout), found by
# linking: TFLite's RuntimeShape and MultiplyByQuantizedMultiplier, libbase's clock, properties,
# strings and mapped files (libbase's logging.cpp needs a newer liblog than Debian's: the glue's
# host_logging.cpp stands in for it).
SUPPORT = ("litert/tflite/kernels/internal/runtime_shape.cc", "litert/tflite/kernels/internal/common.cc",
           "litert/tflite/kernels/internal/quantization_util.cc", "litert/tflite/kernels/internal/portable_tensor_utils.cc",
           "litert/tflite/kernels/internal/reference/portable_tensor_utils.cc",
           "litert/tflite/util.cc", "litert/tflite/array.cc", "litert/tflite/core/c/common.cc",
           "libbase/chrono_utils.cpp", "libbase/properties.cpp", "libbase/strings.cpp", "libbase/mapped_file.cpp",
           "libbase/stringprintf.cpp", "libbase/threads.cpp", "libbase/parsebool.cpp")
# nnts's own sources (nnts/sdk/aosp/) linked into every build.
GLUE_SOURCES = ("aosp_cpu_driver.cpp", "host_logging.cpp")
LIBS = ("-lpthread",)


class BuildError(Exception):
    """A missing file, package or compiler, or a file the driver cannot do without: one line."""


class NotCompiledYet(BuildError):
    """More object files to compile than the caller allows (a test that only reuses a build)."""


def default_out(settings: Settings) -> Path | None:
    """The shared build folder of CI and the tests: aosp-driver in nnts's cache folder
    (~/.cache/nnts/aosp-driver by default); None when caching is off."""
    return settings.cache_dir / "aosp-driver" if settings.cache_dir is not None else None


@dataclass
class Result:
    binary: Path
    built: list[str] = field(default_factory=list)        # operation files compiled
    unbuilt: dict[str, str] = field(default_factory=dict)  # operation file: why not
    compiled: int = 0                                       # object files compiled this time
    reused: int = 0                                         # object files found by their hash
    seconds: float = 0.0


def register(sub) -> None:
    p = sub.add_parser("aosp-driver", help="build AOSP's CPU executor as a driver (from an AOSP checkout)")
    commands = p.add_subparsers(dest="aosp_command", required=True)
    b = commands.add_parser("build", help="compile CHECKOUT's CpuExecutor and operations with nnts's glue")
    b.add_argument("checkout", help="a folder laid out as ../shared/aosp-native (neuralnetworks/, litert/, ruy/, "
                                    "libbase/, flatbuffers/)")
    b.add_argument("--out", required=True, help="the build folder: DIR/aosp-cpu-driver, DIR/obj (reused objects)")
    b.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="compilers at once (default: CPUs)")
    b.add_argument("--cxx", default="g++", help="the C++ compiler (default: g++)")
    b.add_argument("--sanitize", choices=("address", "undefined"), action="append", default=[],
                   help="build nnts's glue and the SDK sources with this sanitizer (-fsanitize=..., -g; objects "
                        "kept apart by their flags' hash); AOSP's objects stay uninstrumented unless --sanitize-aosp")
    b.add_argument("--sanitize-aosp", action="store_true",
                   help="with --sanitize: instrument AOSP's executor, operations and libraries too (a full build)")
    b.add_argument("--check", action="store_true",
                   help="only check that CHECKOUT, the packages and the compiler are there (exit 1 naming the "
                        "first missing)")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        if args.check:
            check(Path(args.checkout), args.cxx)
            print(f"{args.checkout}: ready to build")
            return 0
        result = build(Path(args.checkout), Path(args.out), jobs=args.jobs, cxx=args.cxx,
                       progress=lambda line: print(line, file=sys.stderr), sanitize=args.sanitize,
                       sanitize_aosp=args.sanitize_aosp)
    except BuildError as e:
        print(f"nnts aosp-driver: {e}", file=sys.stderr)
        return 1
    print(f"{result.binary}: {len(result.built)} operation files built, {len(result.unbuilt)} not "
          f"({', '.join(sorted(result.unbuilt)) or 'none'}); {result.compiled} compiled, {result.reused} reused, "
          f"{result.seconds:.0f} s")
    return 0


def check(checkout: Path, cxx: str) -> None:
    """Raise BuildError naming the first thing missing."""
    if not checkout.is_dir():
        raise BuildError(f"{checkout}: no such folder")
    for rel, what in LAYOUT:
        if not (checkout / rel).is_file():
            raise BuildError(f"{checkout} lacks {rel} ({what}); lay it out as ../shared/aosp-native is")
    for path, package in PACKAGES:
        if not Path(path).exists():
            raise BuildError(f"{path} is missing: install the Debian package {package}")
    if shutil.which(cxx) is None:
        raise BuildError(f"no C++ compiler {cxx!r} on PATH: install g++ (or set CXX)")


def flags(checkout: Path, include_link: Path) -> list[str]:
    """The compile flags of ../shared/aosp-native's README, with nnts's SDK and glue folders."""
    a, nn = checkout, checkout / "neuralnetworks"
    return ["-std=gnu++17", "-w", "-include", "cstddef", "-include", "cstring", "-include", "mutex",
            "-include", "functional", "-DNN_INCLUDE_CPU_IMPLEMENTATION", "-DNN_COMPATIBILITY_LIBRARY_BUILD",
            f"-I{nn}/common/include", f"-I{nn}/common/types/include", f"-I{nn}/common/types/include/nnapi",
            f"-I{nn}/common/types/src", f"-I{nn}/common/types/operations/include",
            f"-I{nn}/common/cpu_operations", f"-I{nn}/common", f"-I{nn}/common/random",
            f"-I{nn}/runtime/include", f"-I{include_link}", f"-I{a}/litert", f"-I{a}/ruy",
            f"-I{a}/flatbuffers/include", f"-I{a}/libbase/include", "-I/usr/include/gemmlowp",
            "-I/usr/include/eigen3", "-I/usr/include/android", f"-I{SDK / 'include'}"]


def sources(checkout: Path) -> tuple[list[Path], list[Path]]:
    """(the sources the driver needs, the operation files, which may fail)."""
    common = checkout / "neuralnetworks" / "common"
    needed = [common / name for name in COMMON]
    needed += sorted(p for p in (common / "types" / "src").glob("*.cpp") if p.name not in TYPES_SKIPPED)
    needed += sorted((common / "types" / "operations" / "src").glob("*.cpp"))
    needed += [checkout / rel for rel in SUPPORT]
    operations = sorted(p for p in (common / "cpu_operations").glob("*.cpp") if not p.stem.endswith("Test"))
    return needed, operations


def headers_digest(checkout: Path) -> str:
    """A hash of every header of the checkout (every object depends on them)."""
    h = hashlib.sha256()
    for path in sorted(checkout.rglob("*")):
        if path.suffix in (".h", ".hpp", ".inc", ".hh") and path.is_file():
            h.update(str(path.relative_to(checkout)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def sdk_digest() -> str:
    """A hash of the SDK's headers and the glue's own: only the glue's and the SDK's objects depend
    on them, so a change of the SDK recompiles those few files, not AOSP's."""
    h = hashlib.sha256()
    for path in sorted((SDK / "include").rglob("*")) + sorted((SDK / "src").glob("*.hpp")) + sorted(GLUE.glob("*.hpp")):
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def object_salt(cxx: str, cflags: list[str], checkout: Path, out: Path) -> str:
    """What every object file depends on besides its source: the compiler, the flags (with the
    checkout's and the build folder's paths left out: the headers' bytes stand for them, so a build
    folder moved, or a checkout copied elsewhere, keeps its objects) and the headers."""
    placeholders = [flag.replace(str(out), "<out>").replace(str(checkout), "<checkout>") for flag in cflags]
    return hashlib.sha256("\0".join([compiler_version(cxx), *placeholders, headers_digest(checkout)])
                          .encode()).hexdigest()


def compiler_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout


def registered_operations(source: Path) -> list[str]:
    text = source.read_text(errors="replace")
    return re.findall(r"NN_REGISTER_OPERATION(?:_DEFAULT_VALIDATION)?\(\s*([A-Z0-9_]+)", text)


def first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error:" in line or "fatal error:" in line:
            return line.split("error:", 1)[1].strip()
    return (stderr.strip().splitlines() or ["the compiler failed"])[-1]


def build(checkout: Path, out: Path, *, jobs: int = 1, cxx: str = "g++", progress=lambda line: None,
          compile_limit: int | None = None, sanitize: list[str] | tuple[str, ...] = (),
          sanitize_aosp: bool = False) -> Result:
    """Compile and link the driver into out; compile_limit: raise NotCompiledYet, compiling nothing,
    when more object files than that are missing from out/obj. ``sanitize`` instruments the glue
    and the SDK sources (a few files: the objects of a plain build serve AOSP's part, which the
    sanitizers' runtimes accept uninstrumented); with ``sanitize_aosp`` AOSP's objects as well."""
    start = time.monotonic()
    checkout = checkout.resolve()
    cxx_path = shutil.which(cxx) or cxx
    check(checkout, cxx)
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    (out / "obj").mkdir(exist_ok=True)
    include_link = out / "include"
    link = include_link / "tensorflow" / "lite"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and os.readlink(link) != str(checkout / "litert" / "tflite"):
        link.unlink()
    if not link.exists():
        link.symlink_to(checkout / "litert" / "tflite")
    sanitizers = [f"-fsanitize={name}" for name in sanitize] + (["-g", "-fno-omit-frame-pointer"] if sanitize else [])
    glue_cflags = flags(checkout, include_link) + [OPTIMIZATION] + sanitizers
    cflags = glue_cflags if sanitize_aosp else flags(checkout, include_link) + [OPTIMIZATION]
    salt = object_salt(cxx_path, cflags, checkout, out)
    glue_salt = object_salt(cxx_path, glue_cflags, checkout, out)
    needed, operations = sources(checkout)
    # a sanitized driver is named apart, so that it shares out/obj (AOSP's objects) with the plain one
    binary = "-".join([BINARY, *sorted(set(sanitize)), *(["aosp"] if sanitize and sanitize_aosp else [])])
    result = Result(binary=out / binary)

    def object_path(source: Path, extra: tuple[str, ...] = (), also: str = "", glue: bool = False) -> Path:
        key = hashlib.sha256(((glue_salt if glue else salt) + "\0".join(extra) + also).encode()
                             + source.read_bytes()).hexdigest()[:32]
        return out / "obj" / f"{source.stem}-{key}.o"

    missing = [s for s in needed + operations
               if not object_path(s).exists() and not object_path(s).with_suffix(".failed").exists()]
    if compile_limit is not None and len(missing) > compile_limit:
        raise NotCompiledYet(f"{len(missing)} of {len(needed) + len(operations)} object files are not compiled "
                             f"in {out}")

    def compile_one(source: Path, extra: tuple[str, ...] = (), also: str = "",
                    glue: bool = False) -> tuple[Path, str | None]:
        obj = object_path(source, extra, also, glue)
        failed = obj.with_suffix(".failed")  # a file that did not compile: its error, kept as an object is
        if obj.exists() or failed.exists():
            result.reused += 1
            return obj, failed.read_text() if failed.exists() else None
        tmp = obj.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run([cxx_path, *(glue_cflags if glue else cflags), *extra, "-c", str(source), "-o", str(tmp)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            if "error:" not in done.stderr:  # killed, out of memory...: not the source's fault, not kept
                return obj, first_error(done.stderr)
            failed.write_text(first_error(done.stderr))
            return obj, failed.read_text()
        tmp.replace(obj)
        result.compiled += 1
        progress(f"compiled {source.name}")
        return obj, None

    companions = {name: [checkout / "neuralnetworks" / "common" / rel for rel in rels]
                  for name, rels in COMPANIONS.items()}
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        needed_objects = list(pool.map(compile_one, needed))
        operation_objects = list(pool.map(compile_one, operations))
        companion_objects = {name: list(pool.map(compile_one, files)) for name, files in companions.items()}
    objects = []
    for source, (obj, error) in zip(needed, needed_objects):
        if error is not None:
            raise BuildError(f"{source.relative_to(checkout)} does not compile: {error}")
        objects.append(obj)
    unbuilt_ops: list[tuple[str, str]] = []
    unregistered: list[str] = []
    stand_ins = []
    for source, (obj, error) in zip(operations, operation_objects):
        reason = f"{source.name} does not compile: {error}"
        for companion, (_, companion_error) in zip(companions.get(source.name, []),
                                                   companion_objects.get(source.name, [])):
            if error is None and companion_error is not None:
                error = companion_error
                reason = (f"{source.name} links with {companion.relative_to(checkout / 'neuralnetworks' / 'common')}, "
                          f"which does not compile: {companion_error}")
        if error is None:
            objects.append(obj)
            objects += [o for o, _ in companion_objects.get(source.name, [])]
            result.built.append(source.name)
            continue
        result.unbuilt[source.name] = reason
        registered = registered_operations(source)
        if registered:
            unbuilt_ops += [(op, reason) for op in registered]
            unregistered += registered
        elif source.name in EXECUTOR_FILES:
            op, stand_in = EXECUTOR_FILES[source.name]
            unbuilt_ops.append((op, reason))
            stand_ins.append(GLUE / stand_in)
        else:
            raise BuildError(f"{source.relative_to(checkout)} does not compile ({error}) and CpuExecutor "
                             "calls it directly")
    generated = out / "generated"
    generated.mkdir(exist_ok=True)
    inc = unbuilt_inc(checkout, unbuilt_ops)
    write_if_changed(generated / "aosp_unbuilt.inc", inc)
    write_if_changed(generated / "aosp_unregistered.cpp", unregistered_cpp(unregistered))
    glue = [*(GLUE / name for name in GLUE_SOURCES), generated / "aosp_unregistered.cpp", *stand_ins,
            *(SDK / "src" / name for name in SDK_SOURCES)]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        glue_objects = list(pool.map(lambda s: compile_one(s, (f"-I{generated}",), inc + sdk_digest(), True), glue))
    for source, (obj, error) in zip(glue, glue_objects):
        if error is not None:
            raise BuildError(f"{source.name} does not compile: {error}")
        objects.append(obj)
    tmp = out / f"{binary}.{os.getpid()}.tmp"
    done = subprocess.run([cxx_path, *sanitizers, *(str(o) for o in objects), "-o", str(tmp), *absl_libs(), *log_libs(),
                           *LIBS],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        undefined = re.findall(r"undefined reference to `([^']+)'", done.stderr)
        detail = f"undefined {', '.join(sorted(set(undefined))[:5])}" if undefined else first_error(done.stderr)
        raise BuildError(f"the link failed: {detail}")
    tmp.replace(result.binary)
    result.seconds = time.monotonic() - start
    manifest = {"checkout": str(checkout), "built": result.built, "unbuilt": result.unbuilt,
                "unsupported_operations": dict(unbuilt_ops), "optimization": OPTIMIZATION,
                "sanitize": sorted(set(sanitize)), "sanitize_aosp": bool(sanitize and sanitize_aosp)}
    write_if_changed(out / f"{binary}.json", json.dumps(manifest, indent=1) + "\n")
    return result


def absl_libs() -> list[str]:
    return []


def log_libs() -> list[str]:
    """liblog as Debian installs it (android-liblog: under the multiarch folder's android/)."""
    for folder in sorted(Path("/usr/lib").glob("*/android")) + [Path("/usr/lib/android")]:
        if (folder / "liblog.so").exists():
            return [f"-L{folder}", f"-Wl,-rpath,{folder}", "-llog"]
    raise BuildError("liblog.so is missing: install the Debian package android-liblog-dev")


def unbuilt_inc(checkout: Path, unbuilt: list[tuple[str, str]]) -> str:
    codes = operation_codes(checkout)
    return "".join(f"{{{codes[op]}, {json.dumps(op + ': ' + reason)}}},\n" for op, reason in unbuilt)


def unregistered_cpp(operations: list[str]) -> str:
    """Registration functions for operations whose file did not build: none, as AOSP writes
    NN_OPERATION_IS_NOT_IMPLEMENTED."""
    lines = ["// Generated by nnts aosp-driver build: operations whose source file did not compile.",
             "#include <OperationResolver.h>", "namespace android::nn {"]
    lines += [f"const OperationRegistration* register_{op}() {{ return nullptr; }}"
              for op in operations]
    lines.append("}  // namespace android::nn")
    return "\n".join(lines) + "\n"


def operation_codes(checkout: Path) -> dict[str, int]:
    """OperationType's names and codes, from the module's canonical OperationTypes.h."""
    text = (checkout / "neuralnetworks/common/types/include/nnapi/OperationTypes.h").read_text()
    return {name: int(code) for name, code in re.findall(r"\b([A-Z][A-Z0-9_]+)\s*=\s*(\d+)\s*,", text)}


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
