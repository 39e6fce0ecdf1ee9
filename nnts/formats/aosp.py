"""``nnts vectors import-aosp CHECKOUT``: the NNAPI test specs of a driver team's own AOSP checkout
as test-vector files, made by that checkout's own test generator.

AOSP writes its tests in a Python DSL (``runtime/test/specs/<version>/*.mod.py``) that its
generator (``tools/test_generator``) turns into C++ test models. This runs that generator in a
process of its own (one per version folder: the generator keeps global state) and, where it would
print C++, writes each test model it produces as JSON instead: every example, feed and variation,
as the generated C++ holds it. Nothing of AOSP is part of nnts: the generator and the specs are
read from the checkout given.

Checkouts: ``frameworks/ml`` (``nn/tools/test_generator``, ``nn/runtime/test/specs``; up to
Android 11) and ``packages/modules/NeuralNetworks`` (``tools/test_generator``,
``runtime/test/specs``; later), or any folder holding either, or an AOSP tree holding them.
"""
from __future__ import annotations

import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FORMAT = "nnapi-test-vector/1"
LICENSE = "Apache-2.0, derived from the Android Open Source Project NNAPI test specs"
# The generator's version names and NNAPI's feature levels (ANEURALNETWORKS_FEATURE_LEVEL_*).
FEATURE_LEVELS = {"V1_0": 27, "V1_1": 28, "V1_2": 29, "V1_3": 30, "AIDL_V1": 31, "AIDL_V2": 1000006,
                  "AIDL_V3": 1000007, "AIDL_V4": 1000008}
GENERATOR = Path("tools") / "test_generator" / "test_generator.py"
SPECS = Path("runtime") / "test" / "specs"


def find_generators(checkout: Path) -> list[tuple[Path, Path]]:
    """(generator folder, specs folder) pairs under ``checkout``: the folder itself, ``nn/`` in
    it, or the places ``frameworks/ml`` and ``packages/modules/NeuralNetworks`` have in AOSP."""
    candidates = [checkout, checkout / "nn", checkout / "frameworks" / "ml" / "nn",
                  checkout / "packages" / "modules" / "NeuralNetworks"]
    candidates += [p.parent.parent.parent for p in checkout.glob(f"*/*/{GENERATOR}")]
    found = []
    for root in dict.fromkeys(c.resolve() for c in candidates):
        if (root / GENERATOR).is_file() and (root / SPECS).is_dir():
            found.append((root / GENERATOR.parent, root / SPECS))
    return found


def version_folders(specs: Path) -> list[Path]:
    return sorted(p for p in specs.iterdir() if p.is_dir() and any(p.glob("*.mod.py")))


GENERATOR_TIMEOUT_S = 900  # one version folder: the largest (V1_2, ~300 specs) takes under a minute
OUTPUT_LIMIT = 64 << 20  # bytes of one file the generator's process writes (its output, one spec's JSON)


def unknown_versions(checkout: str, versions: list[str] | None) -> list[str]:
    """The ``versions`` that are not spec folders of the checkout (a typo: said before the run);
    none where the checkout has no generator (:func:`import_checkout` says so)."""
    generators = find_generators(Path(checkout))
    found = {folder.name for _, specs in generators for folder in version_folders(specs)}
    return [v for v in versions or () if generators and v not in found]


def import_checkout(checkout: str, out: str, versions: list[str] | None = None, log=print,
                    timeout_s: float = GENERATOR_TIMEOUT_S) -> tuple[int, int, list[str]]:
    """Writes ``out/<version>/<spec>.json`` for every spec of the checkout; returns (files written,
    test models, problems). A spec the generator fails on is a problem, not the end of the run.
    The specs are a checkout's code: each version folder's generator runs in a process of its
    own with a time limit and a bound on every file it writes (its output included), and its
    output is read from a file line by line, never held whole."""
    generators = find_generators(Path(checkout))
    if not generators:
        raise FileNotFoundError(f"{checkout}: no NNAPI test generator ({GENERATOR}) with its specs ({SPECS}) "
                                "here or in frameworks/ml/nn or packages/modules/NeuralNetworks")
    files = models = 0
    problems: list[str] = []
    several = len(generators) > 1  # frameworks/ml and packages/modules in one tree: kept apart
    for generator, specs in generators:
        for folder in version_folders(specs):
            if versions and folder.name not in versions:
                continue
            target = (Path(out) / (generator.parent.parent.name if several else "") / folder.name).resolve()
            target.mkdir(parents=True, exist_ok=True)
            summary, found, failure = _run_generator(generator, folder, target, timeout_s)
            problems += [f"{folder.name}/{p}" for p in found]
            if failure:
                problems.append(f"{folder}: the generator failed: {failure}")
            if summary:
                files += summary[0]
                models += summary[1]
                log(f"{generator.parent.parent.name}/{folder.name}: {summary[1]} test models in {summary[0]} files")
    return files, models, problems


def _bounded_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))


def _run_generator(generator: Path, folder: Path, target: Path, timeout_s: float):
    """((files, models) or None, problems, why it failed or None) of one version folder."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run([sys.executable, "-m", "nnts.formats.aosp", str(generator), str(folder),
                                   str(target)], stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=str(target),
                                  timeout=timeout_s, preexec_fn=_bounded_files)
            status = done.returncode
        except subprocess.TimeoutExpired:
            status = None
        summary, problems = None, []
        out.seek(0)
        for raw in out:
            line = _printable(raw[:1000].decode("utf-8", "replace").rstrip("\n"))
            if line.startswith("imported ") and len(line.split()) == 3 and line.split()[1].isdigit() \
                    and line.split()[2].isdigit():
                summary = tuple(int(x) for x in line.split()[1:3])
            elif line.startswith("problem ") and len(problems) < 10000:
                problems.append(line[len("problem "):])
        if status is None:
            return summary, problems, f"still running after {timeout_s:g} s (stopped)"
        if status == -signal.SIGXFSZ or status != 0 and max(out.seek(0, os.SEEK_END),
                                                            err.seek(0, os.SEEK_END)) >= OUTPUT_LIMIT:
            return summary, problems, f"wrote a file over {OUTPUT_LIMIT >> 20} MiB (stopped)"
        if status != 0:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 4096))
            tail = [ln for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()][-1:]
            return summary, problems, _printable(tail[0]) if tail else f"exit status {status}"
        return summary, problems, None


def _printable(text: str) -> str:
    """A line of the generator's output as one printable line (it is a checkout's text)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:500]


def differences(imported: str, expected: str, versions: list[str] | None = None) -> tuple[int, list[str]]:
    """Compares every test model of the vector files under ``expected`` (in its ``versions``
    folders, if given) with the model of the same name in the same file under ``imported``:
    (models compared, differences as text). Values are
    compared as their element type holds them (a float32 written as 0.1 or 0.100000001 is one value)."""
    compared, found = 0, []
    root = Path(expected)
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root)
        if versions and rel.parts[0] not in versions:
            continue
        mine = Path(imported) / rel
        if not mine.is_file():
            found.append(f"{rel}: not imported")
            continue
        ours = {t["name"]: t for t in json.loads(mine.read_text())["tests"]}
        for test in json.loads(path.read_text())["tests"]:
            compared += 1
            other = ours.get(test["name"])
            if other is None:
                found.append(f"{rel}: {test['name']}: not imported")
            else:
                theirs, ours_normal = _normal(test), _normal(other)
                field = next((k for k in theirs if theirs[k] != ours_normal.get(k)), None)
                if field is not None:
                    found.append(f"{rel}: {test['name']}: {field} differs")
    return compared, found


def _normal(test: dict) -> dict:
    def operand(o: dict) -> dict:
        o = dict(o, scale=_element("FLOAT32", o["scale"]))
        if o["channel_quant"]:
            o["channel_quant"] = dict(o["channel_quant"], scales=[_element("FLOAT32", s) for s in o["channel_quant"]["scales"]])
        if o["data"] is not None and o["lifetime"] != "SUBGRAPH":
            o["data"] = [_element(o["type"], v) for v in o["data"]]
        return o

    def subgraph(sg: dict) -> dict:
        return dict(sg, operands=[operand(o) for o in sg["operands"]])
    return dict(test, main=subgraph(test["main"]), referenced=[subgraph(sg) for sg in test["referenced"]])


def _element(kind: str, v):
    """A value as its element type holds it (NaN as a string: NaN != NaN)."""
    if isinstance(v, str):
        return v
    if "FLOAT" in kind:
        return _value(kind, v)
    return v


# -- the child process: the checkout's generator, its output as JSON ------------------------------

def _value(kind: str, x):
    if kind in ("TENSOR_FLOAT32", "FLOAT32", "TENSOR_FLOAT16", "FLOAT16"):
        v = (np.float16 if "16" in kind else np.float32)(x)
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return float(str(v))  # the shortest decimal that is exactly this float32 / float16 value
    if kind in ("TENSOR_BOOL8", "BOOL"):
        return bool(x)
    return int(x)


def _operand(tg, operand) -> dict:
    kind = operand.type.type
    extra = operand.type.extraParams
    channel = None if extra is None or getattr(extra, "hide", False) else \
        {"scales": [_value("FLOAT32", s) for s in extra.scales], "channel_dim": int(extra.channelDim)}
    return {"type": kind, "dimensions": [int(d) for d in operand.type.dimensions],
            "scale": _value("FLOAT32", operand.type.scale), "zero_point": int(operand.type.zeroPoint),
            "lifetime": operand.lifetime, "is_ignored": isinstance(operand, tg.IgnoredOutput),
            "channel_quant": channel,
            "data": None if operand.value is None else
            [int(v) for v in operand.value] if operand.lifetime == "SUBGRAPH" else
            [_value(kind, v) for v in operand.value]}


def _subgraph(tg, model) -> dict:
    return {"operands": [_operand(tg, op) for op in model.operands],
            "operations": [{"type": op.optype, "inputs": [i.model_index for i in op.ins],
                            "outputs": [o.model_index for o in op.outs]} for op in model.operations],
            "input_indexes": [op.model_index for op in model.GetInputs()],
            "output_indexes": [op.model_index for op in model.GetOutputs()]}


def _test_model(tg, example) -> dict:
    model = example.model
    return {"name": str(example.testName), "min_feature_level": FEATURE_LEVELS.get(model.version),
            "expect_failure": bool(example.expectFailure), "is_relaxed": bool(model.isRelaxed),
            "expected_multinomial_distribution_tolerance": float(example.expectedMultinomialDistributionTolerance),
            "main": _subgraph(tg, model), "referenced": [_subgraph(tg, m) for m in model.GetReferencedModels()]}


def child(generator: str, folder: str, out: str) -> int:
    """Runs the checkout's generator over one version folder of specs, as AOSP's
    example_generator does, and writes each spec's test models as one JSON file."""
    sys.path.insert(0, generator)
    sys.argv = [sys.argv[0], folder]  # the generator's module-level code reads nothing else
    import test_generator as tg  # the checkout's own generator, on sys.path in this child only
    tg.FileNames.InitializeFileLists(folder, None)
    scope = tg.GetExecScope()
    files = models = 0
    while tg.FileNames.NextFile():
        spec = Path(tg.FileNames.specFile)
        tests: list[dict] = []
        try:
            exec(compile(spec.read_text(), str(spec), "exec"), scope)
            tg.Example.DumpAllExamples(DumpExample=lambda example, fd: tests.append(_test_model(tg, example)),
                                       example_fd=io.StringIO())
        except Exception as e:  # one spec the generator fails on: said, and the others go on
            print(f"problem {spec.name}: {type(e).__name__}: {e}", flush=True)
            continue
        if not tests:
            continue
        doc = {"format": FORMAT, "source": f"{Path(folder).name}/{spec.name}", "license": LICENSE, "tests": tests}
        path = Path(out) / (tg.FileNames.specName + ".json")
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=None, separators=(",", ":"), allow_nan=False))
        tmp.replace(path)
        files += 1
        models += len(tests)
    print(f"imported {files} {models}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child(*sys.argv[1:4]))
