"""Harnesses for the files users hand the suite itself: the oracle is the suite's own
clean error for each format, and anything else escaping (a KeyError, a RecursionError, a
TypeError) is a finding.

``tflite``: ``.tflite`` bytes (two small seeded models, bytes overwritten with boundary values,
cut or extended) through ``parse_tflite`` and ``convert``: TFLiteImportError or a model.
``gate``: ``nnts gate``'s results and baseline JSON (mutated documents) and thresholds TOML
(mutated text): ValueError from loading, then ``violations`` must not raise.
``include``: the JSON ``nnts bench --include`` and ``nnts report`` read (stress, vectors,
conformance): ValueError, or the summary the report shows.
``sidecar``: a fuzz artifact's ``.json`` sidecar, as ``nnts fuzz --replay`` reads it: UsageError
or the fields.

Each harness imports the format it tests when it is made (inside atheris' instrumentation), so a
campaign of another harness starts without it.
"""
from __future__ import annotations

import json
import os
import struct
import tempfile

import numpy as np

from nnts.formats.files import UsageError
from nnts.fuzz.harnesses import WEIRD_FLOATS, WEIRD_INTS, Harness, VectorsHarness, split
from nnts.fuzz.sidecar import read_sidecar


class InputHarness(Harness):
    """A harness over one of the suite's input formats: ``expected`` is its clean error."""

    expected: tuple = (ValueError,)
    mutate = VectorsHarness.mutate
    REPLACEMENTS = VectorsHarness.REPLACEMENTS + [float("nan"), "1.0", [[[]]], {"models": []}]

    def setup(self) -> None:
        self.seeds = self.make_seeds()
        self.path = os.path.join(tempfile.mkdtemp(prefix=f"nnts-fuzz-{self.name}-"), "input")

    def make_seeds(self) -> list:
        raise NotImplementedError

    def __call__(self, data: bytes) -> None:
        try:
            self.run(data)
        except self.expected:
            pass

    def mutated_json(self, data: bytes) -> bytes:
        """A seed document with up to six values replaced, removed, added or resized; sometimes
        the text cut or a byte changed, sometimes nested deeply."""
        index, fdp = split(data, len(self.seeds))
        doc = json.loads(json.dumps(self.seeds[index]))
        for _ in range(fdp.ConsumeIntInRange(0, 6)):
            doc = self.mutate(doc, fdp)
        text = json.dumps(doc).encode()
        choice = fdp.ConsumeIntInRange(0, 9)
        if choice == 1:
            at = fdp.ConsumeIntInRange(0, len(text))
            text = text[:at] + (fdp.ConsumeBytes(1) if fdp.ConsumeBool() else b"")
        elif choice == 2:
            depth = fdp.ConsumeIntInRange(0, 200_000)
            text = b"[" * depth + text + b"]" * depth
        return text

    def write(self, content: bytes) -> str:
        with open(self.path, "wb") as f:
            f.write(content)
        return self.path


def _tiny_models() -> list[bytes]:
    """A small convolutional classifier, float and hybrid (int8 weights): the importer's common
    paths (CONV_2D, ADD, MEAN, FULLY_CONNECTED, SOFTMAX) in under 2 KB each."""
    from nnts.mlts.models.builder import Net
    rng = np.random.default_rng(0)
    models = []
    for precision in ("float", "hybrid"):
        net = Net(precision, "nnts fuzz seed")
        x = net.input("x", (1, 6, 6, 3), -1, 1)
        y = net.conv("conv", x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        z = net.add("add", y, y)
        m = net.mean("mean", z)
        f = net.fully_connected("fc", m, rng.standard_normal((5, 4)).astype(np.float32), np.zeros(5, np.float32))
        models.append(net.finish([x], [net.softmax("softmax", f)]))
    return models


class TfliteHarness(InputHarness):
    name = "tflite"

    def make_seeds(self) -> list:
        from nnts.formats.tflite.importer import TFLiteImportError
        self.expected = (TFLiteImportError,)
        return _tiny_models()

    def run(self, data: bytes) -> None:
        from nnts.formats.tflite.importer import convert, parse_tflite
        index, fdp = split(data, len(self.seeds))
        buf = bytearray(self.seeds[index])
        for _ in range(fdp.ConsumeIntInRange(0, 8)):
            at = fdp.ConsumeIntInRange(0, max(len(buf) - 4, 0))
            kind = fdp.ConsumeIntInRange(0, 4)
            if kind == 0:
                buf[at:at + 4] = struct.pack("<I", fdp.PickValueInList(WEIRD_INTS) & 0xFFFFFFFF)
            elif kind == 1:
                with np.errstate(over="ignore"):
                    buf[at:at + 4] = np.float32(fdp.PickValueInList(WEIRD_FLOATS)).tobytes()
            elif kind == 2:
                buf[at:at + 1] = fdp.ConsumeBytes(1) or b"\0"
            elif kind == 3:
                del buf[fdp.ConsumeIntInRange(0, len(buf)):]
            else:
                buf[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
        convert(parse_tflite(bytes(buf)))


class GateHarness(InputHarness):
    name = "gate"
    THRESHOLDS = ('[accuracy]\ntop1_agreement_min = 0.85\nsnr_db_min = 20.0\nmax_error_steps = 16\n'
                  '[latency]\nmedian_regression_max = 0.25\nnoise_floor_ms = 0.5\n'
                  '[models."lstm_*"]\nsnr_db_min = 15.0\n')

    def make_seeds(self) -> list:
        ok = {"model": "mobilenet_quant.tflite", "sha256": "ab", "status": "ok", "reason": None,
              "driver": {"latency_ms": {"p50": 1.5, "p90": 2.0}},
              "accuracy": {"snr_db": 30.0, "max_error_steps": 2, "top1_agreement": 1.0, "top5_agreement": 1.0}}
        seq = dict(ok, model="lstm_asr_float.tflite", accuracy={"snr_db": None, "frame_cosine_min": 0.99})
        return [{"schema": "nnts-bench/1", "models": [ok, seq,
                                                      {"model": "x.tflite", "status": "import_error", "reason": "r"},
                                                      {"model": "y.tflite", "status": "driver_error", "reason": "r",
                                                       "driver": None, "accuracy": None}]}]

    def run(self, data: bytes) -> None:
        from nnts.mlts import bench_gate
        if data[SPLIT:SPLIT + 1] == b"T":  # the thresholds file: mutated TOML text
            text = bytearray(self.THRESHOLDS.encode())
            for i, byte in enumerate(data[SPLIT + 1:SPLIT + 9]):
                text[(byte * 7 + i * 13) % len(text)] = data[(i + 1) % len(data)]
            thresholds = bench_gate.load_thresholds(self.write(bytes(text)))
        else:
            thresholds = bench_gate.load_thresholds(None)
        results = bench_gate.load_results(self.write(self.mutated_json(data)), "results")
        bench_gate.violations(results, results, thresholds)


SPLIT = 2  # the bytes after the seed index: b"T" picks the thresholds file


class IncludeHarness(InputHarness):
    name = "include"

    def make_seeds(self) -> list:
        return [[{"name": "load_unload", "verdict": "SUCCESS", "message": "", "seconds": 1.0},
                 {"name": "soak", "verdict": "CRASH", "message": "killed", "seconds": 2.0}],
                {"passed": 1, "failed": 1, "skipped": 0, "errors": 0, "crashed": 0, "hung": 0,
                 "results": [{"name": "a", "source": "f", "status": "pass", "message": ""},
                             {"name": "b", "source": "f", "status": "fail", "message": "worst element"}]},
                {"schema": "nnts-conformance/1", "driver": "reference", "totals": {"pass": 3, "fail": 1},
                 "operations": []}]

    def run(self, data: bytes) -> None:
        from nnts.formats.results import included
        included(self.write(self.mutated_json(data)))


class SidecarHarness(InputHarness):
    name = "sidecar"

    def make_seeds(self) -> list:
        self.expected = (UsageError,)
        return [{"harness": "model", "driver": "reference", "vectors": ["/a", "/b"], "provider": "atheris"}]

    def run(self, data: bytes) -> None:
        artifact = self.path + "-artifact"
        self.write(self.mutated_json(data))
        os.replace(self.path, artifact + ".json")
        read_sidecar(artifact)


INPUT_HARNESSES = {h.name: h for h in (TfliteHarness, GateHarness, IncludeHarness, SidecarHarness)}
