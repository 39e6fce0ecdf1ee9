"""Shared memory regions: files under ``/dev/shm`` mapped by the client and the driver process.

Tensor data never travels through the protocol's pipe: the client names a region by path once
(REGION_ADD) and refers to it by id afterwards. Every region this process creates is recorded by
address, so an array that already lives in one (a runtime ``Memory`` from
``ASharedMemory_create``, a constant set from such a memory) is passed as a reference to it,
with no copy; anything else is copied into a staging region for the call. The folder is an
argument (``DEFAULT_DIR`` unless the caller gives another: nnts's entry points pass
``NNTS_SHM_DIR``), for hosts whose ``/dev/shm`` is small or missing.

The driver process is not trusted. It may truncate a region it was given; a read through the
client's mapping past the file's end would then kill the client with SIGBUS. So the client moves
staged data with ``pread``/``pwrite`` on the region's file (never through the mapping), and after
each call checks every region the call named (:func:`intact`), restoring a truncated one's size
before anything reads it, and failing that driver.

Regions are named ``nnts-<pid>-<token>-<n>``, beside a lock file ``nnts-<pid>-<token>.lock`` that
the process holds (``flock``) while it lives: :func:`remove_stale_files` removes only regions of a
lock nobody holds, owned by this user; never by the process id alone, which names another
process in another PID namespace sharing ``/dev/shm``.
"""
from __future__ import annotations

import atexit
import bisect
import errno
import fcntl
import itertools
import mmap
import os
import re
import secrets
import stat
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

    __slots__ = ("id", "path", "size", "fd", "__weakref__")

    def __init__(self, path: str, size: int, fd: int = -1):
        self.id = next(_ids)
        self.path = path
        self.size = size
        self.fd = fd  # the file, open while the region lives: data moves through it, not the mapping


_HOST_ERRNOS = frozenset({errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.EDQUOT})


def _host_error(e: OSError, size: int, folder: str) -> Exception:
    if e.errno not in _HOST_ERRNOS:
        return e
    return HostResourceError(f"the host is out of shared memory: {size} bytes cannot be reserved in {folder} "
                             f"({e.strerror}); a resource of the host, not the driver's failure")


class _Owner:
    """This process's claim on a folder: a lock file held while the process lives, whose name
    (pid and a random token) prefixes every region it makes there."""

    def __init__(self):
        self._held: dict[tuple[int, str], tuple[str, int]] = {}
        self._lock = threading.Lock()
        atexit.register(self.release)

    def release(self) -> None:
        """Remove this process's lock files (at exit: its regions are removed by their finalizers)."""
        with self._lock:
            for (pid, folder), (stem, fd) in list(self._held.items()):
                if pid == os.getpid():
                    try:
                        os.unlink(os.path.join(folder, stem + ".lock"))
                    except OSError:
                        pass
                    os.close(fd)
                    del self._held[(pid, folder)]

    def prefix(self, folder: str) -> str:
        key = (os.getpid(), folder)  # a forked child makes its own claim
        with self._lock:
            if key not in self._held:
                stem = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
                fd = os.open(os.path.join(folder, stem + ".lock"),
                             os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._held[key] = (stem, fd)
            return self._held[key][0]


_OWNER = _Owner()


def allocate(size: int, folder: str = DEFAULT_DIR) -> np.ndarray:
    """``size`` zeroed bytes of shared memory in ``folder``; the region lives as long as the array
    (or a view of it) does."""
    try:
        path = os.path.join(folder, f"{_OWNER.prefix(folder)}-{next(_names)}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise _host_error(e, size, folder) from None
    try:
        # Reserved now: a full /dev/shm is an error here, not a SIGBUS when a page is first touched.
        os.posix_fallocate(fd, 0, max(size, 1))
        mapped = mmap.mmap(fd, max(size, 1))
    except BaseException as e:
        os.unlink(path)
        os.close(fd)
        if isinstance(e, OSError) and e.errno in _HOST_ERRNOS:
            raise _host_error(e, size, folder) from None
        raise
    array = np.frombuffer(mapped, np.uint8, count=size)
    start = array.ctypes.data
    region = Region(path, size, fd)
    _REGISTRY.add(start, region)
    weakref.finalize(mapped, _release, start, region, path, os.getpid())
    return array


def _release(start: int, region: Region, path: str, pid: int) -> None:
    """Run by the mapping's finalizer, at any allocation in any thread: it must take no lock (the
    thread may hold the registry's), so the entry is only marked retired."""
    _REGISTRY.retire(start, region)
    try:
        os.close(region.fd)
    except OSError:
        pass
    if os.getpid() == pid:  # never a file of the parent, in a forked child
        try:
            os.unlink(path)
        except OSError:
            pass


def write(region: Region, data: np.ndarray, offset: int = 0) -> None:
    """Copy ``data``'s bytes into the region's file (not through the mapping)."""
    view = memoryview(np.ascontiguousarray(data)).cast("B")
    while view:
        n = os.pwrite(region.fd, view, offset)
        if n <= 0:
            raise TruncatedRegion(region, os.fstat(region.fd).st_size)
        view, offset = view[n:], offset + n


def read_into(region: Region, out: np.ndarray, offset: int = 0) -> None:
    """Fill ``out`` from the region's file (not through the mapping); a TruncatedRegion where the
    file holds fewer bytes."""
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    view = memoryview(target.reshape(-1).view(np.uint8))
    while view:
        n = os.preadv(region.fd, [view], offset)
        if n <= 0:
            raise TruncatedRegion(region, os.fstat(region.fd).st_size)
        view, offset = view[n:], offset + n
    if target is not out:
        out[...] = target


class TruncatedRegion(Exception):
    """The driver process made a region's file smaller than the region."""

    def __init__(self, region: Region, size: int):
        super().__init__(f"shared memory region {region.path} was cut to {size} of its {region.size} bytes")
        self.region = region


def intact(region: Region) -> bool:
    """Whether the region's file still holds all of it; a cut one is grown back (zeros) first, so
    that no access through a mapping of it faults."""
    if region.fd < 0:
        return True
    size = os.fstat(region.fd).st_size
    if size >= region.size:
        return True
    os.ftruncate(region.fd, max(region.size, 1))
    return False


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
    """Delete the regions in ``folder`` of this user's processes that are gone: those whose lock
    file (:class:`_Owner`) nobody holds. Another user's files, a live process's (in any PID
    namespace) and anything nnts did not name are left alone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    me = os.geteuid()
    for name in names:
        m = re.fullmatch(rf"({_PREFIX}\d+-[0-9a-f]{{16}})\.lock", name)
        if not m:
            continue
        lock_path = os.path.join(folder, name)
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if st.st_uid != me or not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process lives
            stem = m.group(1)
            for region in names:
                if re.fullmatch(rf"{re.escape(stem)}-\d+", region):
                    _unlink_own(os.path.join(folder, region), me)
            _unlink_own(lock_path, me)
        finally:
            os.close(fd)


def _unlink_own(path: str, uid: int) -> None:
    try:
        st = os.lstat(path)
        if st.st_uid == uid and stat.S_ISREG(st.st_mode):
            os.unlink(path)
    except OSError:
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
