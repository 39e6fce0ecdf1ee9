"""HTML reports (jinja2): the conformance matrix and the benchmark report."""
