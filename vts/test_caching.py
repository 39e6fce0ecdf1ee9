"""VTS compilation caching (AOSP's CompilationCachingTests and CompilationCachingSecurityTests):
a model prepared with cache files and a 32-byte token is saved; prepare_model_from_cache gives a
prepared model with correct results; a wrong number of cache files, a one-bit-corrupted or
lengthened model cache and a wrong token fail cleanly; a corrupted data cache never crashes (a
failure or correct results); another compilation overwriting the cache files while the driver
saves or loads them gives a failure or correct results. Skipped when the driver needs no cache
files. Models: about ten spread over the ``NNTS_VTS_SUBSET`` selection.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
from pathlib import Path

import pytest

from nnapi_ref.hal import ErrorStatus, HalError
from nnts.runners.model_runner import check_outputs
from nnts.vts.support import (case_marks, clone_model, first_per_file, make_io, mark_node, model_cases, prepare,
                              prepare_or_skip, run_path)

N_MODELS = 10


def _cases(config) -> list:
    cases = [c for c in first_per_file(model_cases(config), config.nnts_vts.subset) if not c.test.expect_failure]
    step = max(1, len(cases) // N_MODELS)
    return cases[::step][:N_MODELS]


def pytest_generate_tests(metafunc):
    if "cache_case" in metafunc.fixturenames:
        metafunc.parametrize("cache_case", [pytest.param(c, id=f"{c.operation}-{c.dtype}-{c.test.name}",
                                                         marks=case_marks(c)) for c in _cases(metafunc.config)])


@pytest.fixture
def counts(driver):
    n_model, n_data = driver.get_number_of_cache_files_needed()
    if n_model == 0 and n_data == 0:
        pytest.skip("the driver needs no cache files: it does no compilation caching")
    return n_model, n_data


@pytest.fixture
def first_case(request):
    case = _cases(request.config)[0]
    mark_node(request, case)
    return case


def token_for(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


class CacheFiles:
    """``n_model`` + ``n_data`` files under ``folder`` named ``name``; opened as writable binary
    files for each call (the way the runtime hands file descriptors to a driver)."""

    def __init__(self, folder: Path, name: str, n_model: int, n_data: int):
        self.model_paths = [folder / f"{name}.model{i}" for i in range(n_model)]
        self.data_paths = [folder / f"{name}.data{i}" for i in range(n_data)]
        for p in self.model_paths + self.data_paths:
            p.touch()

    @contextlib.contextmanager
    def open(self, extra_model: int = 0, extra_data: int = 0):
        """(model files, data files); ``extra_*`` adds (>0) or drops (<0) files."""
        with contextlib.ExitStack() as stack:
            def files(paths, extra):
                paths = paths[:len(paths) + extra] if extra < 0 else paths + [
                    paths[0].with_suffix(f".extra{i}") if paths else Path(f"extra{i}") for i in range(extra)]
                return [stack.enter_context(open(p, "r+b" if p.exists() else "w+b")) for p in paths]
            yield files(self.model_paths, extra_model), files(self.data_paths, extra_data)


def _save(driver, model, files: CacheFiles, token: bytes, extra_model=0, extra_data=0):
    with files.open(extra_model, extra_data) as (model_cache, data_cache):
        return prepare(driver, model, model_cache=model_cache, data_cache=data_cache, token=token)


def _load(driver, files: CacheFiles, token: bytes, extra_model=0, extra_data=0):
    with files.open(extra_model, extra_data) as (model_cache, data_cache):
        return driver.prepare_model_from_cache(None, model_cache, data_cache, token)


def _check_results(prepared, test, what: str) -> None:
    assert prepared is not None, f"{what}: no prepared model and no error"
    io = make_io(test, "pool")
    outcome = run_path(prepared, io.request, "sync")
    assert outcome.status == ErrorStatus.NONE, f"{what}: execution failed: {outcome.status.name} {outcome.message}"
    dims = [tuple(s.dimensions) for s in outcome.shapes] if outcome.shapes else [tuple(d) for d in test.output_dims]
    problems = check_outputs(test, io.outputs(), dims)
    assert not problems, f"{what}: " + "; ".join(problems)


def _expect_load_failure(driver, files, token, statuses, what: str, **extra) -> None:
    try:
        prepared = _load(driver, files, token, **extra)
    except HalError as e:
        assert e.status in statuses, f"{what}: prepare_model_from_cache failed with {e.status.name}, expected " \
                                     f"{' or '.join(s.name for s in statuses)}"
        return
    pytest.fail(f"{what}: prepare_model_from_cache succeeded (returned {type(prepared).__name__})", pytrace=False)


def _saved(driver, case, tmp_path, counts, name="a"):
    """The case's model prepared (fully supported, or skipped) and saved to fresh cache files."""
    model = clone_model(case.test.model)
    prepare_or_skip(driver, case.test, model)
    files = CacheFiles(tmp_path, name, *counts)
    token = token_for(case.test.name)
    prepared = _save(driver, model, files, token)
    _check_results(prepared, case.test, "prepared while saving to the cache")
    return model, files, token


def test_save_and_load(cache_case, driver, counts, tmp_path, request):
    mark_node(request, cache_case)
    model, files, token = _saved(driver, cache_case, tmp_path, counts)
    _check_results(_load(driver, files, token), cache_case.test, "prepared from the cache")
    # Loading does not consume the cache.
    _check_results(_load(driver, files, token), cache_case.test, "prepared from the cache a second time")


@pytest.mark.parametrize("extra", [(1, 0), (-1, 0), (0, 1), (0, -1)], ids=["model+1", "model-1", "data+1", "data-1"])
def test_save_with_wrong_number_of_files(extra, first_case, driver, counts, tmp_path):
    """Saving is best effort: the compilation succeeds, and nothing loadable is left behind."""
    n_model, n_data = counts
    if n_model + extra[0] < 0 or n_data + extra[1] < 0:
        pytest.skip("no file to leave out")
    model = clone_model(first_case.test.model)
    prepare_or_skip(driver, first_case.test, model)
    files = CacheFiles(tmp_path, "a", n_model, n_data)
    token = token_for(first_case.test.name)
    prepared = _save(driver, model, files, token, *extra)
    _check_results(prepared, first_case.test, f"prepared with {extra} extra cache files")
    _expect_load_failure(driver, files, token, (ErrorStatus.GENERAL_FAILURE, ErrorStatus.INVALID_ARGUMENT),
                         "loading a cache that was saved with the wrong number of files")


@pytest.mark.parametrize("extra", [(1, 0), (-1, 0), (0, 1), (0, -1)], ids=["model+1", "model-1", "data+1", "data-1"])
def test_load_with_wrong_number_of_files(extra, first_case, driver, counts, tmp_path):
    if counts[0] + extra[0] < 0 or counts[1] + extra[1] < 0:
        pytest.skip("no file to leave out")
    _, files, token = _saved(driver, first_case, tmp_path, counts)
    _expect_load_failure(driver, files, token, (ErrorStatus.GENERAL_FAILURE, ErrorStatus.INVALID_ARGUMENT),
                         f"loading with {extra} extra cache files", extra_model=extra[0], extra_data=extra[1])


def _flip_bit(path: Path, where: float) -> None:
    data = bytearray(path.read_bytes())
    if not data:
        pytest.skip(f"{path.name} is empty: nothing to corrupt")
    data[int((len(data) - 1) * where)] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", [0.0, 0.5, 1.0], ids=["first-byte", "middle-byte", "last-byte"])
def test_corrupted_model_cache(where, first_case, driver, counts, tmp_path):
    if counts[0] == 0:
        pytest.skip("the driver uses no model cache files")
    _, files, token = _saved(driver, first_case, tmp_path, counts)
    for i, path in enumerate(files.model_paths):
        original = path.read_bytes()
        _flip_bit(path, where)
        _expect_load_failure(driver, files, token, (ErrorStatus.GENERAL_FAILURE,),
                             f"model cache file {i} with one bit flipped")
        path.write_bytes(original)


def test_wrong_length_model_cache(first_case, driver, counts, tmp_path):
    if counts[0] == 0:
        pytest.skip("the driver uses no model cache files")
    _, files, token = _saved(driver, first_case, tmp_path, counts)
    for i, path in enumerate(files.model_paths):
        original = path.read_bytes()
        path.write_bytes(original + b"\0")
        _expect_load_failure(driver, files, token, (ErrorStatus.GENERAL_FAILURE,),
                             f"model cache file {i} one byte longer")
        path.write_bytes(original)


def test_wrong_token(first_case, driver, counts, tmp_path):
    model, files, token = _saved(driver, first_case, tmp_path, counts)
    wrong = bytes([token[0] ^ 1]) + token[1:]
    _expect_load_failure(driver, files, wrong, (ErrorStatus.GENERAL_FAILURE,), "loading under another token")
    # Preparing from scratch still works.
    _check_results(prepare(driver, clone_model(first_case.test.model)), first_case.test, "prepared from scratch")


@pytest.mark.parametrize("change", ["flip", "lengthen"])
def test_corrupted_data_cache(change, first_case, driver, counts, tmp_path):
    """A corrupted data cache must not crash the driver: fail cleanly or give correct results."""
    if counts[1] == 0:
        pytest.skip("the driver uses no data cache files")
    _, files, token = _saved(driver, first_case, tmp_path, counts)
    for i, path in enumerate(files.data_paths):
        original = path.read_bytes()
        if change == "flip":
            _flip_bit(path, 0.5)
        else:
            path.write_bytes(original + b"\0")
        try:
            prepared = _load(driver, files, token)
        except HalError:
            pass
        else:
            _check_results(prepared, first_case.test, f"loaded with data cache file {i} corrupted ({change})")
        path.write_bytes(original)


def _other_case(case, config):
    """A second model whose cache will overwrite the first one's."""
    return next(c for c in _cases(config) if c is not case and c.test.name != case.test.name)


def _overwriter(source: CacheFiles, target: CacheFiles, stop: threading.Event):
    """Copy ``source``'s cache contents over ``target``'s, again and again, until stopped."""
    blobs = [(p.read_bytes(), q) for p, q in zip(source.model_paths + source.data_paths,
                                                  target.model_paths + target.data_paths)]

    def run():
        while not stop.is_set():
            for blob, q in blobs:
                with open(q, "r+b") as f:
                    f.write(blob)
                    f.truncate()
    return threading.Thread(target=run, daemon=True)


@pytest.mark.parametrize("phase", ["save", "load"])
def test_concurrent_overwrite(phase, first_case, driver, counts, tmp_path, request):
    """Another model's cache copied over the files while the driver writes (``save``) or reads
    (``load``) them: a clean failure, or a prepared model with the first model's results."""
    other = _other_case(first_case, request.config)
    prepare_or_skip(driver, other.test, clone_model(other.test.model))
    _, other_files, _ = _saved(driver, other, tmp_path, counts, name="b")
    model = clone_model(first_case.test.model)
    prepare_or_skip(driver, first_case.test, model)
    files = CacheFiles(tmp_path, "a", *counts)
    token = token_for(first_case.test.name)
    if phase == "load":
        _check_results(_save(driver, model, files, token), first_case.test, "prepared while saving")
    for _ in range(5):
        stop = threading.Event()
        thread = _overwriter(other_files, files, stop)
        thread.start()
        try:
            if phase == "save":
                prepared = _save(driver, model, files, token)
                _check_results(prepared, first_case.test, "prepared while the cache was overwritten")
            try:
                prepared = _load(driver, files, token)
            except HalError:
                continue
        finally:
            stop.set()
            thread.join()
        _check_results(prepared, first_case.test, "loaded from a cache overwritten by another model's")
