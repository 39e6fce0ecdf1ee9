"""HTML reports (jinja2): the conformance page, the benchmark page and a driver's page, made from
results JSON (read through :mod:`nnts.formats.results`)."""
