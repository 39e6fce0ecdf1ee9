"""``nnts bench``'s TFLite baseline in a process of its own: TensorFlow Lite's interpreter can crash
(a segmentation fault on NaN quantization scales, say) or hang on a malformed model, and in
process that would end the run with every row already measured. Here a crash is the row's
``baseline_error`` and the driver's figures are still measured.

The latency is not distorted by the process boundary: each inference is timed inside the child,
around the same call as it was in process (inputs set, ``invoke``, outputs read), and the time
sent back; the parent still alternates driver and baseline
input by input, so a shared machine's drift affects both alike.

The child speaks one JSON line per request on a private pipe (its stdout is TFLite's chatter, sent
to stderr): ``{"samples": PATH}`` (an ``.npz`` of the inputs, ``in{i}_{k}`` for sample i, input
k), ``{"time": i}`` (seconds of one inference of sample i), ``{"throughput": n}``,
``{"outputs": PATH, "reference": bool}`` (the first output for every sample, written to PATH as
``.npz``). Each answer is a JSON line; ``{"error": ...}`` when TFLite refuses the request.

    python -m nnts.mlts.tflite_baseline MODEL.tflite [--reference]
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from nnts.formats.tflite.importer import parse_tflite
from nnts.runners.contained import exit_text

ANSWER_TIMEOUT_S = 600  # one request: creating the interpreter, or the throughput run of a large model
INFLIGHT = 4  # executions (and interpreters) in flight for the throughput figure


def tflite_interpreter_class():
    """ai_edge_litert's Interpreter and OpResolverType, or (None, None) when not installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType  # an extra: None, None without it
    except ImportError:
        return None, None
    return Interpreter, OpResolverType


def timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


class TfliteRunner:
    """One TFLite Interpreter, one thread; LSTM variable states reset before each inference,
    as nnapi_ref starts every execution from zero states."""

    def __init__(self, path: Path, reference_kernels: bool = False):
        interpreter_cls, resolver = tflite_interpreter_class()
        self.path = path
        kwargs = {"experimental_op_resolver_type": resolver.BUILTIN_REF} if reference_kernels else {}
        self.make = lambda: _allocated(interpreter_cls(model_path=str(path), num_threads=1, **kwargs))
        self.compile_ms, self.it = timed(self.make)
        self.compile_ms *= 1e3
        self.inputs = self.it.get_input_details()
        self.outputs = self.it.get_output_details()
        self.stateful = any(t.is_variable for t in parse_tflite(Path(path).read_bytes()).tensors)

    def run(self, inputs, it=None) -> list[np.ndarray]:
        it = it or self.it
        if self.stateful:
            it.reset_all_variables()
        for d, x in zip(self.inputs, inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        return [it.get_tensor(d["index"]).copy() for d in self.outputs]

    def throughput(self, samples, total: int) -> float:
        """Inferences per second from INFLIGHT interpreters invoking in as many threads."""
        interpreters = [self.make() for _ in range(INFLIGHT)]

        def work(k):
            for i in range(k, total, INFLIGHT):
                self.run(samples[i % len(samples)], interpreters[k])

        threads = [threading.Thread(target=work, args=(k,)) for k in range(INFLIGHT)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return total / (time.perf_counter() - t0)


def _allocated(interpreter):
    interpreter.allocate_tensors()
    return interpreter


class BaselineCrashed(Exception):
    """The child died or stopped answering: its reason, for the row's ``baseline_error``."""


class TfliteProcess:
    """The interface ``nnts bench`` uses of a TFLite interpreter, served by a child process."""

    def __init__(self, path: Path, reference_kernels: bool = False):
        self.path = Path(path)
        self._folder = tempfile.TemporaryDirectory(prefix="nnts-tflite-")
        self._stderr = open(os.path.join(self._folder.name, "stderr"), "w+", encoding="utf-8", errors="replace")
        argv = [sys.executable, "-m", "nnts.mlts.tflite_baseline", str(path)] + (["--reference"] if reference_kernels else [])
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        ready = self._answer()
        if "error" in ready:
            self.close()
            raise ValueError(ready["error"])
        self.compile_ms = ready["compile_ms"]
        self.inputs = [{"shape": np.array(i["shape"]), "dtype": np.dtype(i["dtype"]), "quantization": tuple(i["quantization"])}
                       for i in ready["inputs"]]
        self.outputs = [{"dtype": np.dtype(o["dtype"])} for o in ready["outputs"]]
        self._samples = None

    def _ask(self, request: dict) -> dict:
        try:
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: _answer says how
        answer = self._answer()
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def _answer(self) -> dict:
        readable, _, _ = select.select([self._process.stdout], [], [], ANSWER_TIMEOUT_S)
        line = self._process.stdout.readline() if readable else None
        if line:
            return json.loads(line)
        if line is None:
            self._process.kill()
            self._process.wait()
            raise BaselineCrashed(f"TFLite's interpreter did not answer within {ANSWER_TIMEOUT_S} s (killed)")
        code = self._process.wait()
        raise BaselineCrashed(f"TFLite's interpreter crashed on it ({exit_text(code)})" + self._last_stderr_line())

    def _last_stderr_line(self) -> str:
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().splitlines() if line.strip() and not line.startswith("INFO:")]
        return f": {lines[-1][:300]}" if lines else ""

    def set_samples(self, samples: list[list[np.ndarray]]) -> None:
        """The inputs the requests name by index, handed over once."""
        path = os.path.join(self._folder.name, "samples.npz")
        np.savez(path, **{f"in{i}_{k}": x for i, inputs in enumerate(samples) for k, x in enumerate(inputs)})
        self._ask({"samples": path, "count": len(samples)})
        self._samples = len(samples)

    def time(self, i: int) -> float:
        """Seconds of one inference of sample ``i``, measured in the child."""
        return self._ask({"time": i})["seconds"]

    def throughput(self, total: int) -> float:
        return self._ask({"throughput": total})["per_s"]

    def first_outputs(self) -> list[np.ndarray]:
        """The first output of every sample."""
        path = os.path.join(self._folder.name, "outputs.npz")
        self._ask({"outputs": path})
        with np.load(path, allow_pickle=False) as data:
            return [data[f"out{i}"] for i in range(self._samples)]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._stderr.close()
        self._folder.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _serve(path: str, reference_kernels: bool) -> None:
    """The child: one interpreter, requests from stdin, answers on the private pipe."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # TFLite's and numpy's prints go to stderr, never into the answers

    def answer(**fields):
        answers.write(json.dumps(fields) + "\n")

    try:
        runner = TfliteRunner(Path(path), reference_kernels=reference_kernels)
    except (ValueError, RuntimeError) as e:  # TFLite refuses the file: the parent's baseline_error
        answer(error=str(e))
        return
    answer(compile_ms=runner.compile_ms,
           inputs=[{"shape": [int(n) for n in d["shape"]], "dtype": np.dtype(d["dtype"]).str,
                    "quantization": [float(d["quantization"][0]), int(d["quantization"][1])]} for d in runner.inputs],
           outputs=[{"dtype": np.dtype(d["dtype"]).str} for d in runner.outputs])
    samples: list = []
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "samples" in request:
                with np.load(request["samples"], allow_pickle=False) as data:
                    samples = [[data[f"in{i}_{k}"] for k in range(len(runner.inputs))] for i in range(request["count"])]
                answer(ok=True)
            elif "time" in request:
                answer(seconds=timed(runner.run, samples[request["time"]])[0])
            elif "throughput" in request:
                answer(per_s=runner.throughput(samples, request["throughput"]))
            elif "outputs" in request:
                np.savez(request["outputs"], **{f"out{i}": runner.run(x)[0] for i, x in enumerate(samples)})
                answer(ok=True)
        except (ValueError, RuntimeError) as e:
            answer(error=str(e))


if __name__ == "__main__":
    _serve(sys.argv[1], "--reference" in sys.argv[2:])
