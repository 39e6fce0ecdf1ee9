"""Shared memory regions: files under ``/dev/shm`` mapped by the client and the driver process.

Tensor data never travels through the protocol's pipe: the client names a region by path once
(REGION_ADD) and refers to it by id afterwards. Every region this process creates is recorded by
address, so an array that already lives in one (a runtime ``Memory`` from
``ASharedMemory_create``, a constant set from such a memory) is passed as a reference to it,
with no copy; anything else is copied into a staging region for the call. The folder is an
argument (``DEFAULT_DIR`` unless the caller gives another: nnts's entry points pass
``NNTS_SHM_DIR``), for hosts whose ``/dev/shm`` is small or missing.
"""
from __future__ import annotations

import bisect
import errno
import itertools
import mmap
import os
import re
import tempfile
import threading
import weakref

import numpy as np

from nnapi_ref.errors import HostResourceError

DEFAULT_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_PREFIX = "nnts-"
_ids = itertools.count(1)
_names = itertools.count(1)


class Region:
    """What the protocol says of a mapped file: its id, path and size. It is registered for as
    long as its mapping lives (as long as any array over it does)."""

    __slots__ = ("id", "path", "size", "__weakref__")

    def __init__(self, path: str, size: int):
        self.id = next(_ids)
        self.path = path
        self.size = size


_HOST_ERRNOS = frozenset({errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.EDQUOT})


def _host_error(e: OSError, size: int, folder: str) -> Exception:
    if e.errno not in _HOST_ERRNOS:
        return e
    return HostResourceError(f"the host is out of shared memory: {size} bytes cannot be reserved in {folder} "
                             f"({e.strerror}); a resource of the host, not the driver's failure")


def allocate(size: int, folder: str = DEFAULT_DIR) -> np.ndarray:
    """``size`` zeroed bytes of shared memory in ``folder``; the region lives as long as the array
    (or a view of it) does."""
    path = os.path.join(folder, f"{_PREFIX}{os.getpid()}-{next(_names)}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise _host_error(e, size, folder) from None
    try:
        # Reserved now: a full /dev/shm is an error here, not a SIGBUS when a page is first touched.
        os.posix_fallocate(fd, 0, max(size, 1))
        mapped = mmap.mmap(fd, max(size, 1))
    except BaseException as e:
        os.unlink(path)
        if isinstance(e, OSError) and e.errno in _HOST_ERRNOS:
            raise _host_error(e, size, folder) from None
        raise
    finally:
        os.close(fd)
    array = np.frombuffer(mapped, np.uint8, count=size)
    start = array.ctypes.data
    region = Region(path, size)
    _REGISTRY.add(start, region)
    weakref.finalize(mapped, _release, start, region, path, os.getpid())
    return array


def _release(start: int, region: Region, path: str, pid: int) -> None:
    """Run by the mapping's finalizer, at any allocation in any thread: it must take no lock (the
    thread may hold the registry's), so the entry is only marked retired."""
    _REGISTRY.retire(start, region)
    if os.getpid() == pid:  # never a file of the parent, in a forked child
        try:
            os.unlink(path)
        except OSError:
            pass


class _Registry:
    """Live regions by start address, to find the region an array lies in."""

    def __init__(self):
        self._starts: list[int] = []
        self._regions: dict[int, Region] = {}
        self._retired: list[tuple[int, Region]] = []  # appended by finalizers, lock-free
        self._lock = threading.Lock()

    def retire(self, start: int, region: Region) -> None:
        self._retired.append((start, region))

    def _purge(self) -> None:
        """Drop retired entries (the lock held); an address reused since keeps its new region."""
        while self._retired:
            start, region = self._retired.pop()
            if self._regions.get(start) is region:
                del self._regions[start]
                del self._starts[bisect.bisect_left(self._starts, start)]

    def add(self, start: int, region: Region) -> None:
        with self._lock:
            self._purge()
            if start not in self._regions:
                bisect.insort(self._starts, start)
            # Replaces a region unmapped at this address whose retirement is still to come.
            self._regions[start] = region

    def find(self, array: np.ndarray) -> tuple[Region, int] | None:
        """The region holding all of ``array``'s bytes and the offset of its first byte."""
        if not array.flags.c_contiguous:
            return None
        address = array.ctypes.data
        with self._lock:
            self._purge()
            i = bisect.bisect_right(self._starts, address) - 1
            if i < 0:
                return None
            start = self._starts[i]
            region = self._regions[start]
        if address + array.nbytes > start + region.size:
            return None
        return region, address - start


_REGISTRY = _Registry()


def find(array: np.ndarray) -> tuple[Region, int] | None:
    return _REGISTRY.find(array)


def remove_stale_files(folder: str = DEFAULT_DIR) -> None:
    """Delete regions in ``folder`` left behind by processes of this user that no longer exist."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(rf"{_PREFIX}(\d+)-\d+", name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        except PermissionError:
            pass


class StagingArena:
    """Reusable shared memory for data that does not already live in shared memory (POINTER
    arguments, pools over plain arrays): (array, region) pairs, back to the arena after the call."""

    def __init__(self, folder: str = DEFAULT_DIR):
        self.folder = folder
        self._free: list[tuple[np.ndarray, Region]] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> tuple[np.ndarray, Region]:
        with self._lock:
            best = None
            for i, (array, _) in enumerate(self._free):
                if array.nbytes >= size and (best is None or array.nbytes < self._free[best][0].nbytes):
                    best = i
            if best is not None and self._free[best][0].nbytes <= max(4 * size, 1 << 16):
                return self._free.pop(best)
        array = allocate(max(size, 4096), self.folder)
        return array, find(array)[0]

    def give_back(self, borrowed: tuple[np.ndarray, Region]) -> None:
        with self._lock:
            if len(self._free) < 16:
                self._free.append(borrowed)
