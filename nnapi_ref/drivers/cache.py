"""The reference driver's compilation cache: the model is saved in the test-vector encoding.

Model cache file: ``MAGIC``, sha256(token), sha256(payload), payload (the model as JSON).
Data cache file: ``MAGIC``, sha256(token), sha256(payload). Any mismatch, a wrong length,
a wrong token or a flipped bit makes loading fail cleanly with GENERAL_FAILURE.
"""
from __future__ import annotations

import hashlib
import json

from nnapi_ref.hal import ErrorStatus, HalError, Model
from nnapi_ref.types import MAX_NUMBER_OF_CACHE_FILES
from nnapi_ref.vectors import FormatError, model_from_json, model_to_json

MAGIC = b"NNTSREF1"
_HEADER = len(MAGIC) + 32 + 32


def check_cache_files(files, needed: int, what: str) -> None:
    if len(files) != needed or needed > MAX_NUMBER_OF_CACHE_FILES:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{len(files)} {what} cache files given, {needed} needed")



def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def save_to_cache(model: Model, model_cache, data_cache, token: bytes | None, counts: tuple[int, int]) -> None:
    """Write ``model`` to the cache files. Failures are ignored: caching is best effort."""
    if token is None:
        return
    check_cache_files(model_cache, counts[0], "model")
    check_cache_files(data_cache, counts[1], "data")
    payload = json.dumps(model_to_json(model)).encode()
    header = MAGIC + _digest(token) + _digest(payload)
    try:
        model_cache[0].seek(0)
        model_cache[0].truncate()
        model_cache[0].write(header + payload)
        model_cache[0].flush()
        data_cache[0].seek(0)
        data_cache[0].truncate()
        data_cache[0].write(header)
        data_cache[0].flush()
    except OSError:
        pass


def load_from_cache(model_cache, data_cache, token: bytes, counts: tuple[int, int]) -> Model:
    check_cache_files(model_cache, counts[0], "model")
    check_cache_files(data_cache, counts[1], "data")
    if token is None or len(token) != 32:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, "cache token must be 32 bytes")
    try:
        model_cache[0].seek(0)
        blob = model_cache[0].read()
        data_cache[0].seek(0)
        data = data_cache[0].read()
    except OSError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot read the cache: {e}") from None
    if len(blob) < _HEADER or blob[:len(MAGIC)] != MAGIC:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "model cache: not a reference-driver cache")
    if blob[len(MAGIC):len(MAGIC) + 32] != _digest(token):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "model cache: saved under another token")
    payload = blob[_HEADER:]
    if blob[len(MAGIC) + 32:_HEADER] != _digest(payload):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "model cache: checksum mismatch (corrupted)")
    if data != blob[:_HEADER]:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "data cache: does not match the model cache")
    try:
        return model_from_json(json.loads(payload))
    except (ValueError, KeyError, TypeError, FormatError) as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"model cache: cannot decode: {e}") from None
