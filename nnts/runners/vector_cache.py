"""A cache of decoded test-vector files, so that the suite's collection does not parse 59 MB of
JSON in every process (each pytest-xdist worker collects the whole suite, and a driver engineer
runs it again and again: parsing was a third of the CPU time of collecting 48k tests).

A cached file is the file's JSON with every decoded ``data`` list replaced by a reference into
a binary blob of the decoded arrays. Loading it runs the same reader (``vectors.test_from_json``,
every check included) on that much smaller document, the references resolved to the arrays;
only the conversion of number lists to arrays is skipped. An entry is keyed by the file's
resolved path, size and modification time and by the source of the reader and of this module,
so an edited file or a changed reader is read afresh. A missing, unreadable or damaged entry is
a miss (the file is read as usual); a file that does not load is never cached (its error is
raised as usual). No code is loaded from the cache: JSON and raw array bytes only.

The cache folder is the caller's (``Settings.cache_dir``: ``NNTS_CACHE_DIR``, ``$XDG_CACHE_HOME/nnts``
or ``~/.cache/nnts``; None for no cache); entries go in its ``vectors`` folder and are written
atomically (two xdist workers writing the same entry is harmless). It is bounded: once per process,
before its first entry is written, the least recently used entries beyond :data:`LIMIT` bytes are
removed (entries of an earlier reader are never used again). ``nnts cache clear`` removes it all.
Only files named as this module names its entries, of this user, are ever removed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import stat
import struct
import tempfile
from pathlib import Path

import numpy as np

from nnapi_ref import vectors

MAGIC = b"nnts-vector-cache/1\n"
BLOB_KEY = "$nnts_blob"  # {"$nnts_blob": [offset, dtype, shape]} stands for a decoded data list
ALIGN = 16
LIMIT = 256 << 20  # bytes of entries kept (the shared corpus of 4,300 files takes about 90 MB)
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.bin|\.tmp-\w+\.bin")


@functools.cache
def _reader_version() -> bytes:
    """Changes whenever the reader or this module changes."""
    digest = hashlib.sha256()
    for module in (vectors.__file__, __file__):
        digest.update(Path(module).read_bytes())
    return digest.digest()


def _entry(path: Path, folder: Path) -> Path | None:
    try:
        resolved = path.resolve()
        stat = resolved.stat()
    except OSError:
        return None
    key = f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode() + _reader_version()
    return folder / (hashlib.sha256(key).hexdigest() + ".bin")


def load_file(path: str | os.PathLike, cache_dir: str | os.PathLike | None) -> list[vectors.TestModel]:
    """``vectors.load_file(path)``, from the cache in ``cache_dir`` when it holds the file (None:
    no cache)."""
    path = Path(path)
    folder = Path(cache_dir) / "vectors" if cache_dir is not None else None
    entry = _entry(path, folder) if folder else None
    if entry is None:
        return vectors.load_file(path)
    tests = _read(entry, path)
    if tests is not None:
        return tests
    doc = vectors.read_document(path)
    recorded: dict[int, tuple[list, np.ndarray]] = {}  # id(data list) -> (the list, its array)

    def record(values, decode):
        array = decode()
        if isinstance(values, list) and values:
            recorded.setdefault(id(values), (values, array))
        return array

    token = vectors.DATA_HOOK.set(record)
    try:
        tests = vectors.tests_of_document(doc, path)  # a bad file raises FormatError: nothing is cached
    finally:
        vectors.DATA_HOOK.reset(token)
    _write(entry, doc, recorded)
    return tests


def _read(entry: Path, path: Path) -> list[vectors.TestModel] | None:
    """The cached file's test models; None when there is no usable entry."""
    try:
        raw = entry.read_bytes()
    except OSError:
        return None
    if not raw.startswith(MAGIC):
        return None
    try:
        start = len(MAGIC) + 8
        (length,) = struct.unpack("<Q", raw[len(MAGIC):start])
        doc = json.loads(raw[start:start + length])
        blob_start = start + length + (-(start + length) % ALIGN)
        blob = memoryview(raw)[blob_start:]

        def resolve(values, decode):
            if isinstance(values, dict) and BLOB_KEY in values:
                offset, dtype, shape = values[BLOB_KEY]
                return np.frombuffer(blob, dtype, math.prod(shape), offset).reshape(shape).copy()
            return decode()

        token = vectors.DATA_HOOK.set(resolve)
        try:
            return vectors.tests_of_document(doc, path)
        finally:
            vectors.DATA_HOOK.reset(token)
    except (ValueError, KeyError, TypeError, IndexError, struct.error, vectors.FormatError):
        return None  # damaged or foreign: the file itself is read


def _write(entry: Path, doc, recorded: dict[int, tuple[list, np.ndarray]]) -> None:
    """The document with its decoded data lists replaced by references, then the blob."""
    chunks: list[bytes] = []
    offset = 0

    def replace(node):
        nonlocal offset
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, list) and id(value) in recorded:
                array = np.ascontiguousarray(recorded[id(value)][1])
                pad = -offset % ALIGN
                chunks.append(b"\0" * pad)
                node[key] = {BLOB_KEY: [offset + pad, array.dtype.str, list(array.shape)]}
                chunks.append(array.tobytes())
                offset += pad + array.nbytes
            else:
                replace(value)

    replace(doc)
    skeleton = json.dumps(doc, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<Q", len(skeleton)) + skeleton
    head += b"\0" * (-len(head) % ALIGN)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        _bound_once(str(entry.parent))
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".bin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(head)
                f.writelines(chunks)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full cache folder: the next run reads the file again


def entries(folder: str | os.PathLike) -> list[tuple[Path, os.stat_result]]:
    """The cache's entries under ``folder`` (the cache folder): files named as entries, of this
    user; nothing else there is counted or removed."""
    vectors_folder = Path(folder) / "vectors"
    try:
        names = os.listdir(vectors_folder)
    except OSError:
        return []
    found = []
    for name in names:
        if _ENTRY_NAME.fullmatch(name):
            try:
                st = os.lstat(vectors_folder / name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                found.append((vectors_folder / name, st))
    return found


def prune(folder: str | os.PathLike, limit: int) -> int:
    """Remove the least recently used entries until they take at most ``limit`` bytes; the number removed."""
    found = sorted(entries(folder), key=lambda e: max(e[1].st_atime, e[1].st_mtime))
    total = sum(st.st_size for _, st in found)
    removed = 0
    for path, st in found:
        if total <= limit:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= st.st_size
        removed += 1
    return removed


def clear(folder: str | os.PathLike) -> tuple[int, int]:
    """Remove every entry (and the folders nnts made, when empty); (entries, bytes) removed."""
    found = entries(folder)
    removed = size = 0
    for path, st in found:
        try:
            os.unlink(path)
        except OSError:
            continue
        removed += 1
        size += st.st_size
    for empty in (Path(folder) / "vectors", Path(folder)):
        try:
            empty.rmdir()
        except OSError:
            break
    return removed, size


@functools.cache
def _bound_once(vectors_folder: str) -> None:
    prune(Path(vectors_folder).parent, LIMIT)
