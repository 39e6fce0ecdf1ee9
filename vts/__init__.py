"""VTS: tests that call a driver's interface (:mod:`nnapi_ref.hal`) directly, with no runtime in
between, so no validation or CPU fallback hides a driver's faults. ``pytest vts --driver=...``.

A package (as ``cts`` and ``tests`` are) so that ``vts/test_generated.py`` and ``cts/test_generated.py``
can be collected in the same session. Environment variables sizing the run:

* ``NNTS_VTS_SUBSET``: how many test models of each test-vector file also run the other execution
  paths (callback, fenced, burst, dynamic shapes, insufficient output, device memory), and the
  request-validation tests; ``1`` by default, ``all`` for every model. Every model always runs
  the synchronous path.
* ``NNTS_VTS_MUTATION_SUBSET``: how many models of each file get every model mutation of
  ``test_validate_model.py`` (``1`` by default, ``all``, or ``0`` for none).
"""
