"""Where the suite's own files are: found through the import system (``importlib.resources``), so
an installed and an editable install (a clone) find them the same way.

The data packages are ``nnts.cts.corpus`` (the project's test-vector corpus),
``nnts.conformance`` (the published expected-failure lists and class reproducers, the clone's
``docs/conformance``), ``nnts.docs`` (the clone's ``docs``) and ``nnts.examples`` (the example
drivers). A clone also has AOSP's test vectors and the benchmark's models in
``../shared`` beside it; an installed nnts has none.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

CORPUS = Path(str(resources.files("nnts.cts"))) / "corpus"
CONFORMANCE = Path(str(resources.files("nnts.conformance")))


def docs_folder() -> Path:
    """The clone's docs/, installed as nnts.docs (``nnts docs``)."""
    return Path(str(resources.files("nnts.docs")))


def examples_folder() -> Path:
    """The clone's examples/, installed as nnts.examples (``nnts init`` copies the Python driver)."""
    return Path(str(resources.files("nnts.examples")))


def _clone() -> Path | None:
    """The clone the suite runs from: the folder holding ``cts/`` when it is this project's
    checkout (its ``pyproject.toml`` names the project), else None (an installed nnts)."""
    root = CORPUS.parent.parent
    try:
        return root if 'name = "nnts"' in (root / "pyproject.toml").read_text(encoding="utf-8") else None
    except OSError:
        return None


CLONE = _clone()
SHARED = CLONE.parent / "shared" if CLONE else None
SHARED_VECTORS = SHARED / "vectors" if SHARED else None
SHARED_MODELS = SHARED / "models" if SHARED else None
