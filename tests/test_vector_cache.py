"""The cache of decoded test-vector files (nnts.runners.vector_cache): a file read from the cache is
the file read by ``vectors.load_file``, field by field; an edited file, a changed reader, a
damaged entry or a bad file never yields stale or wrong test models."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import using_drivers, vectors
from nnapi_ref.drivers.example_extension import ExampleExtensionDevice
from nnapi_ref.drivers.reference import ReferenceDevice
from nnts.formats.paths import CORPUS
from nnts.runners import vector_cache
from nnts.runners.settings import Settings

from .test_extensions import EXPECTED, Q, mixed_model
from .test_vectors_and_cli import add_test, write


@pytest.fixture
def load(tmp_path):
    """``vector_cache.load_file`` with a cache of the test's own."""
    return lambda path: vector_cache.load_file(path, tmp_path / "cache")


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache" / "vectors"


def same(a, b) -> bool:
    """Equal values of equal types; arrays of the same dtype, shape and elements (NaN equal to
    NaN), writable like a freshly decoded array."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and b.flags.writeable
                and a.tobytes() == b.tobytes())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return type(a) is type(b) and a == b


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.bin")) if folder.is_dir() else []


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.name)
def test_corpus_files_read_from_the_cache_are_the_files(path, cache_dir, load):
    plain = vectors.load_file(path)
    first = load(path)  # reads the file, writes the entry
    assert len(entries(cache_dir)) == 1
    cached = load(path)
    assert same(plain, first) and same(plain, cached)


def test_special_values_and_extension_data(tmp_path, cache_dir, load):
    path = write(tmp_path / "special.json", [add_test("nan", [1.5, "NaN"], ["Infinity", 3], [3.5, "NaN"])])
    extension = tmp_path / "extension.json"
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        model = mixed_model().hal_model
    vectors.write_file(extension, [vectors.TestModel("dequantize64", model, [Q], [EXPECTED], [False],
                                                     output_dims=[(4,)])])
    for file in (path, extension):
        plain = vectors.load_file(file)
        load(file)
        assert same(plain, load(file))
    assert len(entries(cache_dir)) == 2


def test_the_entry_is_what_is_read_until_the_file_changes(tmp_path, load):
    path = write(tmp_path / "a.json", [add_test("a", [1, 2], [3, 4], [4, 6])])
    load(path)
    stat = path.stat()
    # Same size and modification time, other values: the entry answers (it is keyed by both).
    path.write_text(path.read_text().replace("[4, 6]", "[5, 6]"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert load(path)[0].expected[0].tolist() == [4, 6]
    # An edit that changes the modification time is read afresh.
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert load(path)[0].expected[0].tolist() == [5, 6]


def test_a_damaged_entry_is_a_miss(tmp_path, cache_dir, load):
    path = write(tmp_path / "a.json", [add_test("a", [1, 2], [3, 4], [4, 6])])
    load(path)
    (entry,) = entries(cache_dir)
    for damage in (b"", vector_cache.MAGIC + b"\xff" * 8, entry.read_bytes()[:-6], b"not a cache entry"):
        entry.write_bytes(damage)
        assert same(vectors.load_file(path), load(path))


def test_a_bad_file_raises_its_error_and_is_not_cached(tmp_path, cache_dir, load):
    path = write(tmp_path / "bad.json", [add_test("a", [1, 2], [3, "x"], [4, 6])])
    for _ in range(2):
        with pytest.raises(vectors.FormatError, match="bad data for TENSOR_FLOAT32"):
            load(path)
    assert entries(cache_dir) == []


def test_references_are_read_only_from_the_cache(tmp_path, load):
    """A test-vector file whose data is a cache reference is malformed, as before the cache."""
    test = add_test("a", [1, 2], [3, 4], [4, 6])
    test["main"]["operands"][0]["data"] = {vector_cache.BLOB_KEY: [0, "<f4", [2]]}
    path = write(tmp_path / "a.json", [test])
    with pytest.raises(vectors.FormatError):
        load(path)


def test_an_empty_cache_dir_turns_the_cache_off(tmp_path):
    path = write(tmp_path / "a.json", [add_test("a", [1, 2], [3, 4], [4, 6])])
    assert Settings.from_environment({"NNTS_CACHE_DIR": ""}).cache_dir is None
    assert same(vectors.load_file(path), vector_cache.load_file(path, None))
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_the_entry_holds_no_data_lists(tmp_path, cache_dir, load):
    path = write(tmp_path / "a.json", [add_test("a", [1, 2], [3, 4], [4, 6])])
    load(path)
    raw = entries(cache_dir)[0].read_bytes()
    start = len(vector_cache.MAGIC) + 8
    skeleton = json.loads(raw[start:start + int.from_bytes(raw[len(vector_cache.MAGIC):start], "little")])
    operands = skeleton["tests"][0]["main"]["operands"]
    # Each array at a 16-byte boundary, in the document's order: 2 + 2 float32, an int32, 2 float32.
    assert [o["data"] for o in operands] == [{vector_cache.BLOB_KEY: [0, "<f4", [2]]},
                                             {vector_cache.BLOB_KEY: [16, "<f4", [2]]},
                                             {vector_cache.BLOB_KEY: [32, "<i4", [1]]},
                                             {vector_cache.BLOB_KEY: [48, "<f4", [2]]}]
