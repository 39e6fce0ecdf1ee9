"""The published conformance pages' data, installed as ``nnts.conformance``: expected-failure lists and
the reproducers of the documented classes (found through ``nnts.formats.paths``)."""
