"""The conformance report: counts per operation and data type, failures listed."""
from nnts.reports.conformance import summarize, write_report


def test_report_counts_per_operation_and_type(tmp_path):
    rows = [("ADD", "TENSOR_FLOAT32", "pass", "a"), ("ADD", "TENSOR_FLOAT32", "fail", "b"),
            ("ADD", "TENSOR_QUANT8_ASYMM", "unsupported", "c"), ("CONV_2D", "TENSOR_FLOAT32", "pass", "d")]
    matrix, totals, failures = summarize(rows)
    assert matrix["ADD"]["TENSOR_FLOAT32"]["pass"] == 1 and matrix["ADD"]["TENSOR_FLOAT32"]["fail"] == 1
    assert totals["unsupported"] == 1 and failures == ["b"]
    path = tmp_path / "r.html"
    write_report(str(path), rows, "my-driver")
    page = path.read_text()
    assert "my-driver" in page and "2 pass, 1 fail, 1 unsupported." in page
    assert '<td class="fail"' in page and '<td class="unsupported"' in page and "<code>b</code>" in page
