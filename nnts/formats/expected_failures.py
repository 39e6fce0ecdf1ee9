"""The expected-failures file (``--expected-failures`` of ``nnts test`` and ``nnts vectors run``),
or the name of a list the project publishes for a runtime it adapts.

One entry a line, ``#`` starting the reason::

    cts/test_api.py::test_add_operand_rejects_invalid_types   # our driver takes TENSOR_OEM_BYTE
    cts/test_random_operation.py::test_random_operation[MUL-seed17]
    cts/test_generated.py::test_generated[ADD-TENSOR_QUANT8_ASYMM-add_relu]-burst   # one variant
    vts/test_validate_model.py::*[CONV_2D-*   # glob: every validation test of CONV_2D
    add_broadcast_quant8   # a test model's name (every test of it), as nnts vectors run names it

An entry is a test id as pytest prints it in ``nnts test``'s summary (relative to the suite:
``cts/...`` or ``vts/...``, in a clone and installed alike), a generated test's variant id
(``TEST-ID-VARIANT``), the id inside a generated test's brackets, or a test model's name. ``*`` in
an entry matches any run of characters (a glob, as deqp-runner's baselines have them); nothing else
is special, so ids with ``[...]`` are written as printed. Entries that match no test are stale.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
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


@dataclass
class Entry:
    pattern: str
    reason: str
    line: int


@dataclass
class ExpectedFailures:
    """The entries of an expected-failures file, and which of them matched a test."""

    path: str
    entries: list[Entry]
    _exact: dict[str, Entry] = field(init=False, repr=False)
    _globs: list[tuple[re.Pattern, Entry]] = field(init=False, repr=False)
    used: set[int] = field(init=False, default_factory=set)  # lines of entries that matched a test

    def __post_init__(self):
        self._exact = {}
        for e in self.entries:
            self._exact.setdefault(e.pattern, e)
        self._globs = [(re.compile(".*".join(map(re.escape, e.pattern.split("*"))), re.DOTALL), e)
                       for e in self.entries if "*" in e.pattern]

    def entry(self, names) -> Entry | None:
        """The entry listing a test known by ``names`` (most specific name first: an exact entry
        of an earlier name wins, then the first glob, in file order, matching any name)."""
        names = [n for n in names if n]
        for name in names:
            if name in self._exact:
                return self._mark(self._exact[name])
        for pattern, e in self._globs:
            if any(pattern.fullmatch(name) for name in names):
                return self._mark(e)
        return None

    def reason(self, names) -> str | None:
        """The reason of the entry listing a test (``"listed in --expected-failures"`` when it gives
        none), or None when no entry lists it."""
        e = self.entry(names)
        return None if e is None else (e.reason or "listed in --expected-failures")

    def mark_matching(self, names) -> None:
        """Note every entry that lists a test known by ``names`` (for ``stale``), without choosing one."""
        names = [n for n in names if n]
        for name in names:
            if name in self._exact:
                self.used.add(self._exact[name].line)
        for pattern, e in self._globs:
            if e.line not in self.used and any(pattern.fullmatch(name) for name in names):
                self.used.add(e.line)

    def stale(self, files=None) -> list[Entry]:
        """The entries that matched no test. With ``files`` (the suite files that were collected,
        ``cts/test_api.py``), an entry naming a test of another file is not judged: a run of part
        of the suite does not make the rest of the list stale."""
        def judged(e: Entry) -> bool:
            if files is None or "::" not in e.pattern:
                return True
            head = e.pattern.split("::", 1)[0]
            if "*" not in head:
                return head in files
            pattern = re.compile(".*".join(map(re.escape, head.split("*"))))
            return any(pattern.fullmatch(f) for f in files)
        return [e for e in self.entries if e.line not in self.used and judged(e)]

    def _mark(self, e: Entry) -> Entry:
        self.used.add(e.line)
        return e


def load(path: str) -> ExpectedFailures:
    """The expected-failures file at ``path``; one usage line when it cannot be read."""
    entries = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                name, _, reason = line.partition("#")
                if name.strip():
                    entries.append(Entry(name.strip(), reason.strip(), number))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--expected-failures {path}: cannot read it: {e}") from None
    return ExpectedFailures(path, entries)


def stale_lines(path: str, stale: list[Entry]) -> list[str]:
    """What a run says of the entries that matched no test: one line each, with its place."""
    return [f"{path}:{e.line}: {e.pattern}" + (f"  # {e.reason}" if e.reason else "") for e in stale]


@functools.cache
def _suite_file(path: str) -> str:
    parts = Path(path)
    return f"{parts.parent.name}/{parts.name}"


def suite_id(path: str, nodeid: str) -> str:
    """A test's id relative to the suite, ``cts/test_api.py::test_x[...]``, whatever pytest's rootdir
    (a clone, site-packages, the user's folder): ``path`` is the test file's, ``nodeid`` pytest's."""
    return f"{_suite_file(str(path))}::{nodeid.split('::', 1)[-1]}"


def names_of(path: str, nodeid: str, name: str) -> list[str]:
    """The names an entry may give a test by: its suite id, pytest's node id, its name."""
    return [suite_id(path, nodeid), nodeid, name]


def variant_names(names: list[str], case_id: str, model: str, variant: str) -> list[str]:
    """The names of one variant of a generated test known by ``names`` (``names_of``), most
    specific first: the variant's ids, then the test's, then the test model's name."""
    sid = names[0]
    with_variant = f"{sid[:-1]}-{variant}]" if sid.endswith("]") else f"{sid}-{variant}"
    return [with_variant, f"{case_id}-{variant}", *names, case_id, model]
