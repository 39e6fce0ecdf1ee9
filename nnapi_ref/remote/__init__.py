"""Drivers in their own process: the remote-driver protocol (``docs/remote-protocol.md``).

* :mod:`.wire`: frames and the encoding of the HAL's types;
* :mod:`.shm`: shared-memory regions, through which all tensor data travels;
* :mod:`.server`: serves any :class:`nnapi_ref.hal.Device` (``nnts serve DRIVER``);
* :mod:`.client`: a :class:`nnapi_ref.hal.Device` speaking to such a server (``remote:COMMAND``,
  ``socket:PATH``) that survives and classifies a driver that crashes, hangs or misbehaves.
"""
