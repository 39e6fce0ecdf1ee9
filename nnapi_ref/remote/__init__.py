"""Drivers in their own process: the remote-driver protocol (``docs/remote-protocol.md``).

* :mod:`.wire`: frames and the encoding of the HAL's types;
* :mod:`.shm`: shared-memory regions, through which all tensor data travels;
* :mod:`.server`: serves any :class:`nnapi_ref.hal.Device` (``nnts serve DRIVER``);
* :mod:`.client`: a :class:`nnapi_ref.hal.Device` speaking to such a server (``remote:COMMAND``,
  ``socket:PATH``) that survives and classifies a driver that crashes, hangs or misbehaves.
"""


def close_between_writes(write_lock, close) -> None:
    """``close()`` a pipe or socket once no write is in it (``write_lock`` is held by every
    write): closed under a write, its descriptor number can go to the next pipe or connection
    made, and the write lands there. A write in progress ends once the other side is gone
    (EPIPE); should one not end within 2 s, the descriptor is left open rather than closed
    under it."""
    if write_lock.acquire(timeout=2):
        try:
            close()
        except OSError:
            pass
        finally:
            write_lock.release()
