"""The expected-failures file: one test id or test-model name a line, ``#`` starting the reason
(``--expected-failures`` of ``nnts test`` and ``nnts vectors run``), or the name of a list the
project publishes for a runtime it adapts."""
from __future__ import annotations

from pathlib import Path

from nnts.formats.files import UsageError
from nnts.formats.paths import CONFORMANCE

PUBLISHED = ("onnxruntime", "tflite", "tflite-ref")


def expected_failures_file(value: str) -> str:
    """``--expected-failures FILE``, or the name of a published list (``onnxruntime``, ``tflite``,
    ``tflite-ref``: ``docs/conformance/NAME-expected-failures.txt``, installed with nnts)."""
    if value in PUBLISHED and not Path(value).exists():
        return str(CONFORMANCE / f"{value}-expected-failures.txt")
    return value


def load_known_failures(path: str) -> dict[str, str]:
    """Test names (one per line, '#' starts a comment giving the reason) expected to fail."""
    known = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, reason = line.partition("#")
                if name.strip():
                    known[name.strip()] = reason.strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--expected-failures {path}: cannot read it: {e}") from None
    return known
