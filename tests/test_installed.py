"""nnts as a driver team adopts it: the wheel built from this checkout, installed into a fresh
virtual environment, and run from an empty folder that holds only the team's own driver module
and packages of their own named like nnts's folders (``cts``, ``fuzz``, ``reports``), which must
neither shadow nor be shadowed by nnts's.

The fresh environment gets the wheel through pip (``--no-deps``); its dependencies (numpy, pytest,
...) are those of the running environment, reached through a ``.pth`` path entry, so the test
needs no network beyond building the wheel.
"""
from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A vendor's driver: the reference under the vendor's own name.
DRIVER_MODULE = '''
from nnapi_ref.drivers.reference import ReferenceDevice


def make():
    return ReferenceDevice(name="acme-npu")
'''
# The vendor's own packages, named like nnts's repository folders.
VENDOR_PACKAGES = ("cts", "fuzz", "reports")
# Generated models in every execution mode and VTS's validation of them, for two operations.
SELECTION = "(ABS or RELU6 or MUL) and TENSOR_FLOAT32"


def _run(command, cwd, timeout=600, env=None):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env or _env())
    return done.returncode, done.stdout + done.stderr


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_", "PYTHONPATH"))}
    return dict(env, PYTHONDONTWRITEBYTECODE="1")


def _counts(output: str) -> dict[str, int]:
    """pytest's final summary line as {outcome: count}."""
    line = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|skipped|deselected)", ln)][-1]
    return {outcome: int(n) for n, outcome in re.findall(r"(\d+) (\w+)", line)
            if outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error", "errors")}


def _the_wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built once per pytest run. pip builds in the checkout's own
    ``build/`` folder, so two xdist workers building at once break each other's build: the first
    worker to take the lock builds into the run's shared temporary folder, the others reuse it."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    dist = shared / "nnts-wheel"
    with open(shared / "nnts-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(dist.glob("nnts-*.whl"))
        if not built:
            status, out = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist),
                                str(ROOT)], cwd=shared)
            assert status == 0, f"pip wheel failed:\n{out[-3000:]}"
            built = sorted(dist.glob("nnts-*.whl"))
    return built[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh environment's bin folder, the vendor's folder)."""
    base = tmp_path_factory.mktemp("installed")
    wheel = _the_wheel(tmp_path_factory)
    venv = base / "venv"
    status, out = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert status == 0, out
    python = venv / "bin" / "python"
    status, out = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-index", str(wheel)], cwd=base)
    assert status == 0, f"pip install of the wheel failed:\n{out[-3000:]}"
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "nnts_test_dependencies.pth").write_text("\n".join(paths) + "\n")
    vendor = base / "acme"
    vendor.mkdir()
    (vendor / "acme_drv.py").write_text(DRIVER_MODULE)
    for name in VENDOR_PACKAGES:
        (vendor / name).mkdir()
        (vendor / name / "__init__.py").write_text("OWNER = 'acme'\n")
    return venv / "bin", vendor


def _vendor_files(vendor: Path) -> set[str]:
    """What the vendor's folder holds, but pytest's cache (``--lf``), which pytest run there keeps too."""
    return {str(p.relative_to(vendor)) for p in vendor.rglob("*") if not {"__pycache__", ".pytest_cache"} & set(p.parts)}


# The repository's folders and where they land installed (pyproject.toml's package-dir).
INSTALLED_AS = {"nnapi_ref": "nnapi_ref", "nnts": "nnts", "cts": "nnts/cts", "vts": "nnts/vts", "fuzz": "nnts/fuzz",
                "mlts": "nnts/mlts", "reports": "nnts/reports"}


def test_the_wheel_holds_every_module_of_the_checkout(installed):
    bin_, _ = installed
    site = Path(subprocess.check_output([str(bin_ / "python"), "-c",
                                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    missing = [str(path.relative_to(ROOT)) for folder, target in INSTALLED_AS.items()
               for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts
               and not (site / target / path.relative_to(ROOT / folder)).is_file()]
    assert not missing, f"not in the wheel (add their packages to pyproject.toml): {missing}"


def test_the_wheel_holds_the_whole_suite(installed):
    bin_, vendor = installed
    status, out = _run([str(bin_ / "python"), "-c", """
import importlib.metadata as m, importlib.resources as r, nnts, nnts.cts, nnts.vts, nnts.fuzz.engine
import nnts.mlts.bench, nnts.reports.conformance, nnts.plugin
corpus = [p.name for p in (r.files('nnts.cts') / 'corpus').iterdir() if p.name.endswith('.json')]
templates = [p.name for p in (r.files('nnts.reports') / 'templates').iterdir()]
eps = [e.value for e in m.entry_points(group='pytest11') if e.name == 'nnts']
from nnts.formats.expected_failures import expected_failures_file
import os
assert os.path.isfile(expected_failures_file('onnxruntime')) and 'site-packages' in expected_failures_file('tflite')
assert (r.files('nnts') / 'conformance' / 'onnxruntime' / 'nan_maximum.json').is_file()
print(len(corpus), sorted(templates), eps, 'nnts' in m.metadata('nnts')['Description'])
print(nnts.__file__)
"""], cwd=vendor)
    assert status == 0, out
    counts, location = out.splitlines()[:2]
    n, rest = counts.split(" ", 1)
    assert int(n) >= 15, out
    assert "'bench.html.j2', 'conformance.html.j2'" in rest and "['nnts.plugin']" in rest and rest.endswith("True")
    assert str(ROOT) not in location, "the installed nnts must not be this checkout"


def test_vendor_packages_are_neither_shadowed_nor_shadowing(installed):
    bin_, vendor = installed
    status, out = _run([str(bin_ / "python"), "-c",
                        "import cts, fuzz, reports, nnts.fuzz.harnesses, nnts.reports.bench, nnts.cts; "
                        "print(cts.OWNER, fuzz.OWNER, reports.OWNER)"], cwd=vendor)
    assert status == 0 and out.split() == ["acme"] * 3, out


def test_conformance_run_from_the_vendor_folder_matches_the_clone(installed):
    bin_, vendor = installed
    before = _vendor_files(vendor)
    common = ["-k", SELECTION, "-q", "-p", "no:randomly", "--driver", "acme_drv:make", "--no-shared-vectors"]
    status, out = _run([str(bin_ / "nnts"), "test", "-n", "2", *common], cwd=vendor)  # workers import the driver too
    assert status == 0, out[-3000:]
    installed_counts = _counts(out)
    env = dict(_env(), PYTHONPATH=str(vendor))
    status, out = _run([sys.executable, "-m", "pytest", "cts", "vts", *common], cwd=ROOT, env=env)  # one process
    assert status == 0, out[-3000:]
    assert installed_counts == _counts(out) and installed_counts["passed"] > 30
    assert _vendor_files(vendor) == before, "nnts test left files in the vendor's folder"


def test_installed_run_names_tests_relative_to_the_suite(installed, tmp_path):
    """The id the summary prints (``cts/...``, not a path into site-packages) is the one ``-k`` and
    ``--expected-failures`` take, for a test that is not a generated one."""
    bin_, vendor = installed
    test = "cts/test_api.py::test_set_operand_value_misuse"
    listed = tmp_path / "known.txt"
    listed.write_text(f"{test}   # listed by the id the summary prints\n")
    status, out = _run([str(bin_ / "nnts"), "test", "-p", "no:randomly", "--no-shared-vectors", "-rX", "-k", test,
                        "--driver", "acme_drv:make", "--expected-failures", str(listed)], cwd=vendor)
    assert status == 0 and re.search(rf"^XPASS {re.escape(test)} - listed by the id", out, re.MULTILINE), out[-3000:]
    assert "dev/null" not in out and "1 xpassed" in out, out[-3000:]


def test_bad_driver_stops_the_installed_run_at_once(installed):
    bin_, vendor = installed
    status, out = _run([str(bin_ / "nnts"), "test", "--driver", "acme_drv:missing"], cwd=vendor, timeout=120)
    assert status != 0 and "Traceback" not in out
    assert "acme_drv has no missing" in out and "remote:COMMAND" in out


def test_vectors_run_on_the_installed_corpus(installed):
    bin_, vendor = installed
    status, out = _run([str(bin_ / "nnts"), "vectors", "run", "--driver", "acme_drv:make", "-j", "2", "-q"],
                       cwd=vendor)
    assert status == 0, out[-3000:]
    passed = int(re.search(r"(\d+) passed", out).group(1))
    assert passed > 500, out[-2000:]


def test_fuzz_loads_seeds_and_leaves_nothing_behind(installed):
    bin_, vendor = installed
    before = _vendor_files(vendor)
    status, out = _run([str(bin_ / "nnts"), "fuzz", "--driver", "acme_drv:make", "--harness", "execute",
                        "--runs", "500"], cwd=vendor)
    assert status == 0, out[-3000:]
    seeds = int(re.search(r"(\d+) seed inputs", out).group(1))
    assert seeds > 0 and "no findings" in out
    assert _vendor_files(vendor) == before, "a fuzz run that found nothing left its artifacts folder behind"


def test_bench_on_a_seeded_model(installed, tmp_path):
    pytest.importorskip("ai_edge_litert", reason="the seeded models are written with ai-edge-litert")
    from nnts.mlts import models
    model = models.seeded_models(tmp_path, stems=["mobilenet_v1_0.25_128_seeded"])[0]
    bin_, vendor = installed
    result = tmp_path / "bench.json"
    status, out = _run([str(bin_ / "nnts"), "bench", "--driver", "acme_drv:make", "--models", str(model),
                        "--runs", "3", "--warmup", "1", "--json", str(result)], cwd=vendor)
    assert status == 0, out[-3000:]
    assert result.is_file() and '"status": "passed"' in result.read_text().replace('"status":"passed"', '"status": "passed"')


# A team's native driver, written from the installed SDK's header alone: ADD on TENSOR_FLOAT32 of
# one fixed shape, without a fused activation; everything else unsupported. PLANTED_FAULT breaks it.
NATIVE_DRIVER = r'''
#include <cstring>
#include <memory>
#include "nnts/driver.hpp"
using namespace nnts;

static bool agree(const Dimensions& a, const Dimensions& b) {
    if (a.empty() || b.empty()) return true;
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (a[i] && b[i] && a[i] != b[i]) return false;
    return true;
}

static bool plainAdd(const Model::Subgraph& sg, const Operation& op) {
    if (op.type != int32_t(OperationType::ADD) || op.inputs.size() != 3 || op.outputs.size() != 1) return false;
    const Operand &a = sg.operands[op.inputs[0]], &b = sg.operands[op.inputs[1]], &f = sg.operands[op.inputs[2]];
    const Operand& out = sg.operands[op.outputs[0]];
    int32_t fuse = -1;
    if (f.location.pointer) std::memcpy(&fuse, f.location.pointer, 4);
    int32_t t = int32_t(OperandType::TENSOR_FLOAT32);
    return a.type == t && b.type == t && out.type == t && fuse == 0 && agree(a.dimensions, b.dimensions) &&
           agree(a.dimensions, out.dimensions);
}

struct Tensor {
    Dimensions dims;
    std::vector<float> data;
};

struct Prepared : IPreparedModel {
    explicit Prepared(const Model& m) : model(m) {}
    const Model& model;
    Result<ExecutionOutput> execute(const Request& request, bool, TimePoint, Duration) const override {
        const Model::Subgraph& sg = model.main;
        std::vector<Tensor> values(sg.operands.size());
        for (size_t k = 0; k < sg.operands.size(); k++)
            if (sg.operands[k].location.pointer) {
                const float* p = static_cast<const float*>(sg.operands[k].location.pointer);
                values[k] = {sg.operands[k].dimensions, std::vector<float>(p, p + sg.operands[k].location.length / 4)};
            }
        for (size_t i = 0; i < request.inputs.size(); i++) {
            const auto& a = request.inputs[i];
            const float* p = static_cast<const float*>(a.location.pointer);
            values[sg.inputIndexes[i]] = {a.dimensions, std::vector<float>(p, p + a.location.length / 4)};
        }
        for (const Operation& op : sg.operations) {
            const Tensor &x = values[op.inputs[0]], &y = values[op.inputs[1]];
            if (x.dims != y.dims) return error(ErrorStatus::GENERAL_FAILURE, "ADD of two shapes: not supported");
            Tensor z{x.dims, std::vector<float>(x.data.size())};
            for (size_t i = 0; i < x.data.size(); i++) z.data[i] = x.data[i] + y.data[i];
#ifdef PLANTED_FAULT
            if (!z.data.empty()) z.data[0] += 0.5f;
#endif
            values[op.outputs[0]] = z;
        }
        std::vector<OutputShape> shapes;
        bool fits = true;
        for (size_t i = 0; i < request.outputs.size(); i++) {
            const Tensor& z = values[sg.outputIndexes[i]];
            if (!agree(request.outputs[i].dimensions, z.dims))
                return error(ErrorStatus::GENERAL_FAILURE, "the output's shape differs from the requested one");
            shapes.push_back({z.dims, request.outputs[i].location.length >= z.data.size() * 4});
            fits = fits && shapes.back().isSufficient;
        }
        if (!fits) return Error{ErrorStatus::OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small", shapes};
        for (size_t i = 0; i < request.outputs.size(); i++) {
            const Tensor& z = values[sg.outputIndexes[i]];
            std::memcpy(request.outputs[i].location.pointer, z.data.data(), z.data.size() * 4);
        }
        return ExecutionOutput{shapes, Timing{}};
    }
};

struct Device : IDevice {
    std::string name = "acme-native", version = "1.0";
    Capabilities caps;
    std::vector<Extension> extensions;
    Device() { caps.operandPerformance = {{int32_t(OperandType::TENSOR_FLOAT32), {}}, {int32_t(OperandType::INT32), {}}}; }
    const std::string& getName() const override { return name; }
    const std::string& getVersionString() const override { return version; }
    int64_t getFeatureLevel() const override { return 1000007; }
    DeviceType getType() const override { return DeviceType::ACCELERATOR; }
    const std::vector<Extension>& getSupportedExtensions() const override { return extensions; }
    const Capabilities& getCapabilities() const override { return caps; }
    Result<std::vector<bool>> getSupportedOperations(const Model& model) const override {
        std::vector<bool> flags;
        for (const Operation& op : model.main.operations) flags.push_back(plainAdd(model.main, op));
        return flags;
    }
    Result<std::shared_ptr<IPreparedModel>> prepareModel(const Model& model, ExecutionPreference, Priority, TimePoint,
                                                         const std::vector<int>&, const std::vector<int>&,
                                                         const std::vector<uint8_t>&) const override {
        for (const Operation& op : model.main.operations)
            if (!plainAdd(model.main, op)) return error(ErrorStatus::GENERAL_FAILURE, "unsupported operation");
        return std::shared_ptr<IPreparedModel>(std::make_shared<Prepared>(model));
    }
};

int main(int argc, char** argv) { return serve(std::make_shared<Device>(), argc, argv); }
'''


def test_a_native_driver_builds_from_the_installed_sdk_and_its_planted_fault_is_caught(installed, tmp_path):
    """An empty folder, the system compiler and `nnts sdk` of the installed wheel: the driver
    builds warning-free, `nnts test --quick` passes it, and the same driver with a planted fault
    (ADD off by 0.5 in one element) fails."""
    import shlex
    import shutil
    compiler = next((shutil.which(c) for c in (os.environ.get("CXX"), "c++", "g++", "clang++") if c and shutil.which(c)),
                    None)
    if compiler is None:
        pytest.skip("no C++ compiler (c++, g++ or clang++) on PATH: no native driver to build")
    bin_, _ = installed
    folder = tmp_path / "acme-native"
    folder.mkdir()
    (folder / "driver.cpp").write_text(NATIVE_DRIVER)
    status, out = _run([str(bin_ / "nnts"), "sdk", "--cflags", "--sources"], cwd=folder)
    assert status == 0, out
    sources, cflags = (shlex.split(line) for line in out.splitlines())  # in the order --sources, --cflags
    assert str(ROOT) not in out and all(Path(s).is_file() for s in sources), out
    flags = [compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", *cflags]
    status, out = _run([*flags, "-c", *sources], cwd=folder)  # the SDK once, linked into both drivers
    assert status == 0, out[-3000:]
    objects = [Path(s).stem + ".o" for s in sources]
    verdicts = {}
    for name, defines in (("driver", []), ("faulty", ["-DPLANTED_FAULT"])):
        status, out = _run([*flags, *defines, "driver.cpp", *objects, "-lpthread", "-o", name], cwd=folder)
        assert status == 0, out[-3000:]
        status, out = _run([str(bin_ / "nnts"), "test", "--quick", "-q", "-p", "no:randomly", "--no-shared-vectors",
                            "--driver", f"remote:./{name}"], cwd=folder)
        verdicts[name] = status, _counts(out), out
    status, counts, out = verdicts["driver"]
    assert status == 0 and counts["passed"] >= 3, out[-3000:]
    status, counts, out = verdicts["faulty"]
    assert status != 0 and counts.get("failed", 0) >= 1 and "ADD" in out, out[-3000:]
