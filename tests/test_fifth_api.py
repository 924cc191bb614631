"""A fifth API is one new file (``tests/fifth_api.py``) and one registry line: bench_all sweeps
it, the doctor looks for its wrapper, the summarizer reads its CSV."""

from __future__ import annotations

import types

import pytest

import summarize_results
from fi_attn_bench import doctor, suite
from fi_attn_bench.apis import registry
from fi_attn_bench.results.reader import read_stored_rows


@pytest.fixture
def fifth(monkeypatch):
    line = registry.Api("fifth_api", "fifth_api", ("batch_size", "kv_len", "head_dim"))
    monkeypatch.setattr(registry, "APIS", (*registry.APIS, line))
    return registry.spec("fifth_api")


def test_bench_all_lists_the_fifth_api_by_default(fifth, capsys):
    assert suite.main(["--list", "--preset", "smoke", "--device", "cpu", "--backend", "torch"]) == 0
    out = capsys.readouterr().out
    assert "FifthSingleDecodeWrapper: preset smoke, 4 cases" in out
    assert "BatchMLAPagedAttentionWrapper: preset smoke" in out


def test_bench_all_sweeps_it_and_the_summarizer_reads_it(fifth, tmp_path, capsys):
    argv = ["--scripts", "fifth_api", "--device", "cpu", "--backend", "torch", "--preset", "cpu"]
    argv += ["--max-time-per-case", "0.05", "--output-dir", str(tmp_path)]
    assert suite.main(argv) == 0
    (csv_path,) = tmp_path.glob("FifthSingleDecodeWrapper_*.csv")
    rows = list(read_stored_rows(csv_path).rows)
    assert [(r["batch_size"], r["kv_len"], r["status"]) for r in rows] == [
        ("1", "16", "ok"), ("1", "40", "ok"), ("2", "16", "ok"), ("2", "40", "ok")
    ]  # fmt: skip
    assert all(float(r["io_bytes"]) == fifth.io_bytes(
        {k: int(r[k]) for k in fifth.case_fields}, 2) for r in rows)  # fmt: skip
    capsys.readouterr()
    assert summarize_results.main([str(csv_path), "--output", str(tmp_path / "s.md")]) == 0
    report = (tmp_path / "s.md").read_text()
    assert "FifthSingleDecodeWrapper" in report and "kv\\_len=40" in report


def test_the_doctors_api_check_looks_for_the_fifth_wrapper(fifth):
    flashinfer = types.ModuleType("flashinfer")
    flashinfer.FifthSingleDecodeWrapper = type("FifthSingleDecodeWrapper", (), {})
    check = doctor.check_flashinfer_api(flashinfer)
    assert "1 of 5 wrappers: FifthSingleDecodeWrapper" in check.summary


def test_each_registry_line_names_its_specs_case_columns_and_a_face():
    for api in registry.APIS:
        spec = registry.spec(api.script)
        assert spec.case_fields == api.case_fields and spec.script == f"{api.script}.py"


def test_without_its_line_the_summarizer_refuses_the_fifth_apis_csv(tmp_path):
    """What the registry line adds to the summarizer: the API's layout is known."""
    header = "schema_version,api,batch_size,kv_len,head_dim,status,time_ms,bandwidth_GB_s,tflops"
    (tmp_path / "f.csv").write_text(header + ",error_type,error\n1,W,1,16,64,ok,1.0,1.0,1.0,,\n")
    assert (
        summarize_results.main([str(tmp_path / "f.csv"), "--output", str(tmp_path / "s.md")]) == 2
    )


def test_an_unregistered_script_is_a_usage_error():
    with pytest.raises(Exception, match="no API is registered as 'fifth_api'"):
        registry.spec("fifth_api")
