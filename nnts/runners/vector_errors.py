"""A test-vector file that cannot be read (``--vectors`` or the shared set) is one failing test
naming the file and the problem, not an error that ends collection: every other file still runs."""
from __future__ import annotations

import pytest

from nnts.runners.cases import LOAD_ERRORS


class VectorFileError(Exception):
    pass


class UnreadableVectorFile(pytest.Item):
    """A stand-in test for one file ``nnts.runners.cases`` could not load."""

    def __init__(self, *, problem: str, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem

    def runtest(self):
        raise VectorFileError(self.problem)

    def repr_failure(self, excinfo):
        return f"test-vector file not loaded: {self.problem}"

    def reportinfo(self):
        return self.name, None, f"test-vector file {self.name}"


def add_items(session, items: list) -> None:
    """One failing item per file that could not be loaded, at the end of the collection."""
    for path, problem in sorted(LOAD_ERRORS.items()):
        items.append(UnreadableVectorFile.from_parent(session, name=f"vectors[{path}]", problem=problem))
