"""Behaviour of summarize_results.py: the seed's contract and what this harness adds."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from seed_oracle import summarize_results as seed_oracle

import summarize_results as face
from fi_attn_bench.results.reader import is_numeric_column
from fi_attn_bench.results.schema import HARNESS_VERSION, OPTIONAL_COLUMN_NAMES, csv_fieldnames
from fi_attn_bench.summarizer import command_line as sr

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "summarizer"
REAL_CSV = Path(__file__).parent / "fixtures" / "real_csv"
SEED_V1 = FIXTURES / "seed_v1_decode.csv"
LEGACY = FIXTURES / "legacy_decode.csv"
NEW = FIXTURES / "new_decode.csv"

V1_HEADER = (
    "schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    "status,time_ms,bandwidth_GB_s,tflops,error_type,error"
)
CASE = "1,32,8,64"  # seq_len_q, num_qo_heads, num_kv_heads, head_dim (seq_len_kv varies)


def v1_row(batch, time_ms="1.0", bw="100", tf="1", status="ok", err="", api="Decode", kv="128"):
    etype, error = ("RuntimeError", err) if err else ("", "")
    parts = ["1", api, str(batch), "1", kv, "32", "8", "64", status, time_ms, bw, tf, etype, error]
    return ",".join(parts)


def write(path: Path, *lines: str, newline: str = "\n") -> Path:
    path.write_text(newline.join(lines) + newline, encoding="utf-8")
    return path


def run(argv, capsys=None):
    code = sr.main([str(a) for a in argv])
    out = capsys.readouterr() if capsys else None
    return code, out


def report(tmp_path: Path) -> str:
    return (tmp_path / "report.md").read_text(encoding="utf-8")


def summarize(tmp_path, *paths, capsys=None, extra=()):
    return run([*paths, "--output", tmp_path / "report.md", *extra], capsys)


def regress(tmp_path, base, cand, gate=None, capsys=None, extra=()):
    argv = ["--baseline", *base, "--candidate", *cand, "--output", tmp_path / "report.md"]
    if gate is not None:
        argv += ["--fail-on-regression", str(gate)]
    return run([*argv, *extra], capsys)


# --------------------------------------------------------------- summary mode


def test_valid_summary_reports_counts_and_bests(tmp_path, capsys):
    csv_path = write(
        tmp_path / "a.csv", V1_HEADER, v1_row(1, "2.0", "50", "0.5"), v1_row(2, "1.5", "80", "0.4")
    )
    code, out = summarize(tmp_path, csv_path, capsys=capsys)
    text = report(tmp_path)
    assert code == sr.EXIT_OK
    lines = out.out.strip().splitlines()
    assert lines[0] == "Verdict: PASS — all 2 cases ok"  # stdout: verdict and the cases
    assert lines[1].split() == ["API", "Case", "Status", "Time", "ms", "GB/s", "TFLOPS"]
    assert lines[2].startswith("Decode  batch_size=1 ") and lines[2].split()[-4:] == [
        "ok",
        "2",
        "50",
        "0.5",
    ]
    assert lines[4] == (
        "(every case listed: seq_len_q=1, seq_len_kv=128, num_qo_heads=32, num_kv_heads=8, "
        "head_dim=64)"
    )
    assert lines[-1] == f"Summary saved to {tmp_path / 'report.md'}"
    assert text.startswith("# FlashInfer Benchmark Summary\n")
    assert "**Verdict: PASS**" in text
    for line in (
        "- Input files: 1",
        "- Valid files: 1",
        "- Total rows: 2",
        "## API: Decode",
        "- Status: ok=2",
    ):
        assert line in text
    assert "- Minimum time_ms: 1.5 (batch\\_size=2" in text
    assert "- Maximum bandwidth_GB_s: 80 (batch\\_size=2" in text
    assert "- Maximum tflops: 0.5 (batch\\_size=1" in text
    assert f"| {face.escape_markdown(str(csv_path))} | 2 | ok=2 |" in text


def test_failed_case_exits_one_with_details(tmp_path):
    csv_path = write(
        tmp_path / "a.csv", V1_HEADER, v1_row(1), v1_row(2, "", "", "", "failed", "out of memory")
    )
    code, _ = summarize(tmp_path, csv_path)
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert "## Failure Details" in text
    assert "RuntimeError: out of memory" in text
    assert text.index("**Verdict: FAIL**") < text.index("## Failure Details")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "CSV header is missing"),
        (["a,,b"], "CSV contains an empty header name"),
        (
            [V1_HEADER.replace("api", " api")],
            "CSV header names must not contain surrounding whitespace",
        ),
        ([V1_HEADER + ",api"], "CSV contains duplicate header names"),
        (
            ["schema_version,api,status,time_ms"],
            "schema v1 is missing columns: bandwidth_GB_s, error, error_type, tflops",
        ),
        (
            ["schema_version,api,status,time_ms,bandwidth_GB_s,tflops,error_type,error,x"],
            "CSV does not match a known FlashInfer benchmark schema",
        ),
        (
            ["api,time_ms,bandwidth_GB_s,tflops"],
            "CSV does not match a known legacy FlashInfer schema",
        ),
        ([V1_HEADER], "CSV contains no benchmark rows"),
    ],
)
def test_header_errors_exit_two_named_in_report_and_stderr(tmp_path, capsys, lines, message):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    code, out = summarize(tmp_path, path, capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert "## Input Errors" in report(tmp_path)
    assert face.escape_markdown(message) in report(tmp_path)
    assert message in out.err
    assert "Traceback" not in out.err


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            v1_row(1).replace("1,Decode", "2,Decode", 1),
            "line 2: unsupported schema_version '2'; expected '1'",
        ),
        (v1_row(1, status="done"), "line 2: unsupported status 'done'"),
        (
            v1_row(1)[:-1] + "RuntimeError,x",
            "line 2: successful rows must not contain error details",
        ),
        (v1_row(1, "", "", "", "failed"), "line 2: failed rows must contain error_type or error"),
        (v1_row(1, "nan"), "line 2: time_ms must be a finite number"),
        (v1_row(1, "inf"), "line 2: time_ms must be a finite number"),
        (v1_row(1, ""), "line 2: time_ms must be a finite number"),
        (v1_row(1, "0"), "line 2: time_ms must be greater than zero"),
        (v1_row(1, "-1"), "line 2: time_ms must be greater than zero"),
        (v1_row(1, bw="-3"), "line 2: bandwidth_GB_s must not be negative"),
        (v1_row(1, tf="abc"), "line 2: tflops must be a finite number"),
        (v1_row(1, api=" "), "line 2: api must not be empty"),
        (v1_row(1) + ",extra", "line 2: row has more values than the CSV header"),
        (v1_row(1).rsplit(",", 2)[0], "line 2: row has fewer values than the CSV header"),
        ("   ", "line 2: row has fewer values than the CSV header"),
    ],
)
def test_row_errors_exit_two_with_line_numbers(tmp_path, capsys, row, message):
    path = write(tmp_path / "bad.csv", V1_HEADER, row)
    code, out = summarize(tmp_path, path, capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert face.escape_markdown(message) in report(tmp_path)
    assert message in out.err


def test_row_errors_are_named_where_pandas_keeps_text_in_pyarrow(tmp_path):
    """With pyarrow installed, pandas 3 holds str columns in pyarrow, which cannot hold the
    reader's line-end marker: the row-by-row reading keeps its cells as Python objects."""
    pytest.importorskip("pyarrow")
    from fi_attn_bench.results.reader import read_file

    path = write(tmp_path / "bad.csv", V1_HEADER, v1_row(1), "2" + v1_row(2)[1:])
    read = read_file(path)
    assert read.file is None
    assert [issue.message for issue in read.issues] == [
        "line 3: unsupported schema_version '2'; expected '1'"
    ]


def test_one_bad_row_invalidates_the_whole_file(tmp_path):
    path = write(tmp_path / "a.csv", V1_HEADER, v1_row(1), v1_row(2, "nan"), v1_row(3))
    records, issues = face.load_csv(path)
    assert records == []
    assert [issue.message for issue in issues] == ["line 3: time_ms must be a finite number"]


def test_unreadable_inputs_exit_two(tmp_path, capsys):
    bad_bytes = tmp_path / "latin1.csv"
    bad_bytes.write_bytes((V1_HEADER + "\n" + v1_row(1, api="D\xe9code") + "\n").encode("latin-1"))
    missing = tmp_path / "missing.csv"
    code, out = summarize(tmp_path, bad_bytes, missing, capsys=capsys)
    text = report(tmp_path)
    assert code == sr.EXIT_INPUT_ERROR
    assert text.count("unable to read CSV") == 2
    assert "codec can't decode" in text and "No such file" in text
    assert "- Valid files: 0" in text
    assert out.err.count("unable to read CSV") == 2


def test_bom_and_crlf_are_accepted(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (V1_HEADER + "\r\n" + v1_row(1) + "\r\n").encode())
    code, _ = summarize(tmp_path, path)
    assert code == sr.EXIT_OK
    records, issues = face.load_csv(path)
    assert issues == [] and records[0]["schema_version"] == "1" and records[0]["time_ms"] == 1.0


def test_legacy_rows_are_inferred_ok_with_a_note(tmp_path):
    code, _ = summarize(tmp_path, LEGACY)
    text = report(tmp_path)
    assert code == sr.EXIT_OK
    assert "legacy\\_inferred\\_ok=3" in text
    assert "## Compatibility Note" in text
    records, _ = face.load_csv(LEGACY)
    assert records[0]["status"] == "legacy_inferred_ok"
    assert records[0]["error"] == "" and records[0]["_line"] == 2


def test_markdown_escaping_of_csv_text():
    assert (
        face.escape_markdown("a|b*c_d#e[f]`g<h>\\") == "a\\|b\\*c\\_d\\#e\\[f\\]\\`g&lt;h&gt;\\\\"
    )
    assert face.escape_markdown("one\r\ntwo\nthree") == "one<br>two<br>three"


def test_error_text_is_escaped_in_the_report(tmp_path):
    row = v1_row(1, "", "", "", "failed", '"<script>|x\nnext"')
    code, _ = summarize(tmp_path, write(tmp_path / "a.csv", V1_HEADER, row))
    assert code == 1
    assert "&lt;script&gt;\\|x<br>next" in report(tmp_path)


def test_seed_helpers():
    record = {"api": "A", "batch_size": "2", "head_dim": "", "time_ms": 1.0, "_source": "x"}
    assert face.describe_case(record) == "batch_size=2"
    assert face.case_identity(record) == ("A", (("batch_size", "2"), ("head_dim", "")))
    assert face.parse_float("1e3") == 1000.0 and face.parse_float("nan") is None
    assert face.format_delta(math.inf) == "+∞%" and face.format_delta(-2.5) == "-2.50%"
    assert face.format_metric(1234567.0) == "1.23457e+06"


def test_optional_columns_are_validated_not_case_parameters(tmp_path):
    header = V1_HEADER + ",samples,noise_pct,device"
    good = write(tmp_path / "good.csv", header, v1_row(1) + ",10,,H200", v1_row(2) + ",,1.5,")
    records, issues = face.load_csv(good)
    assert issues == []
    assert (
        face.describe_case(records[0])
        == "batch_size=1, seq_len_q=1, seq_len_kv=128, num_qo_heads=32, num_kv_heads=8, head_dim=64"
    )
    bad = write(tmp_path / "bad.csv", header, v1_row(1) + ",0.5,,H200")
    _, issues = face.load_csv(bad)
    assert [i.message for i in issues] == ["line 2: samples must be a whole number >= 1, got '0.5'"]


# ------------------------------------------------------------ regression mode


def test_seed_v1_and_legacy_match_new_style_cases(tmp_path):
    for baseline in (SEED_V1, LEGACY):
        code, _ = regress(tmp_path, [baseline], [NEW], gate=50)
        text = report(tmp_path)
        assert code == sr.EXIT_OK, baseline
        assert "- Matched cases: 3" in text and "- Missing candidate cases: 0" in text
        assert "- New candidate cases: 0" in text


def test_states_and_exit_codes(tmp_path):
    base = write(
        tmp_path / "b.csv",
        V1_HEADER,
        v1_row(1, "1.0"),
        v1_row(2, "1.0"),
        v1_row(3, "1.0"),
        v1_row(4, "", "", "", "failed", "x"),
        v1_row(5, "", "", "", "failed", "x"),
        v1_row(6, "1.0"),
    )
    cand = write(
        tmp_path / "c.csv",
        V1_HEADER,
        v1_row(1, "1.01"),
        v1_row(2, "1.2"),
        v1_row(3, "", "", "", "failed", "y"),
        v1_row(4, "1.0"),
        v1_row(5, "", "", "", "failed", "y"),
        v1_row(7, "1.0"),
    )
    code, _ = regress(tmp_path, [base], [cand], gate=5)
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    for state, batch in (
        ("compared", 1),
        ("regression", 2),
        ("candidate failed", 3),
        ("recovered", 4),
        ("both failed", 5),
    ):
        assert f"| Decode | batch\\_size={batch}, " in text
        assert f"| {state} |" in text
    assert "## Missing Candidate Cases" in text and "batch\\_size=6" in text
    assert "## New Candidate Cases" in text and "batch\\_size=7" in text
    assert "- Regression gate: 5%" in text
    order = [
        text.index(h)
        for h in (
            "**Verdict: FAIL**",
            "## Aggregate Speedup",
            "## Regressions",
            "## Failure Details",
            "## Missing Candidate Cases",
            "## Matched Cases",
        )
    ]
    assert order == sorted(order)


def test_report_only_without_gate_and_improvements_never_fail(tmp_path):
    base = write(tmp_path / "b.csv", V1_HEADER, v1_row(1, "1.0"), v1_row(2, "1.0"))
    cand = write(tmp_path / "c.csv", V1_HEADER, v1_row(1, "3.0"), v1_row(2, "0.1", "900", "9"))
    assert regress(tmp_path, [base], [cand])[0] == sr.EXIT_OK
    assert "- Regression gate: report only" in report(tmp_path)
    cand_fast = write(
        tmp_path / "f.csv", V1_HEADER, v1_row(1, "0.5", "200", "2"), v1_row(2, "0.1", "900", "9")
    )
    assert regress(tmp_path, [base], [cand_fast], gate=0)[0] == sr.EXIT_OK


def test_zero_baseline_throughput_is_infinite_delta(tmp_path):
    base = write(tmp_path / "b.csv", V1_HEADER, v1_row(1, "1.0", "0", "0"))
    cand = write(tmp_path / "c.csv", V1_HEADER, v1_row(1, "1.0", "5", "0"))
    assert regress(tmp_path, [base], [cand], gate=5)[0] == sr.EXIT_OK
    assert "0 → 5, +∞%" in report(tmp_path) and "0 → 0, +0.00%" in report(tmp_path)


def test_duplicate_cases_are_input_errors(tmp_path, capsys):
    base = write(tmp_path / "b.csv", V1_HEADER, v1_row(1), v1_row(1, "2.0"))
    cand = write(tmp_path / "c.csv", V1_HEADER, v1_row(1))
    code, out = regress(tmp_path, [base], [cand], capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert f"duplicate case also found at {base}:2: Decode (batch_size=1" in out.err
    baseline, candidate = (
        face.load_inputs([base], "baseline"),
        face.load_inputs([cand], "candidate"),
    )
    markdown, failed, issues = face.build_regression_markdown(baseline, candidate, None)
    assert len(issues) == 1 and issues[0].group == "baseline" and "- Matched cases: 0" in markdown
    assert failed is False


def test_duplicate_cases_are_input_errors_in_summary_mode_too(tmp_path, capsys):
    """The same file twice summarized as "all 10 case(s) ok"."""
    first = write(tmp_path / "a.csv", V1_HEADER, v1_row(1), v1_row(2))
    second = write(tmp_path / "b.csv", V1_HEADER, v1_row(1), v1_row(2))
    for paths in ([first, second], [first, first]):
        code, out = summarize(tmp_path, *paths, capsys=capsys)
        assert code == sr.EXIT_INPUT_ERROR
        assert f"duplicate case also found at {first}:2: Decode (batch_size=1" in out.err
        assert "PASS" not in report(tmp_path)
    code, out = regress(tmp_path, [first, second], [first], capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert f"{second}: duplicate case also found at {first}:2" in out.err


def test_aggregates_geomean_and_total_ratio(tmp_path):
    base = write(
        tmp_path / "b.csv",
        V1_HEADER,
        v1_row(1, "1.0"),
        v1_row(2, "4.0"),
        v1_row(3, "1.0", api="Other"),
    )
    cand = write(
        tmp_path / "c.csv",
        V1_HEADER,
        v1_row(1, "0.5"),
        v1_row(2, "8.0"),
        v1_row(3, "", "", "", "failed", "x", api="Other"),
    )
    json_path = tmp_path / "r.json"
    regress(tmp_path, [base], [cand], extra=["--json", json_path])
    data = json.loads(json_path.read_text())
    overall = data["aggregates"][0]
    assert overall["scope"] == "overall" and overall["cases"] == 2
    assert overall["geomean_speedup"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert overall["total_time_ratio"] == pytest.approx(8.5 / 5.0)
    assert [a["scope"] for a in data["aggregates"]] == ["overall", "Decode"]
    assert "| overall | 2 | 1.0000x | 5 → 8.5 | 1.7000x |" in report(tmp_path)


NOISE_HEADER = V1_HEADER + ",noise_pct,time_q1_ms,time_q3_ms"


STATS_HEADER = V1_HEADER + ",samples,noise_pct,drift_pct,time_q1_ms,time_q3_ms"


def test_gate_uses_the_uncertainty_of_the_median_not_the_spread(tmp_path):
    """A 6.6 % slowdown with 6.8 % per-call spread but a tight median (500
    samples: 1.57 * 6.8 / sqrt(500) = 0.48 % per side) is a regression; the old
    rule called it within noise (6.6 < 6.8 + 6.8)."""
    base = write(
        tmp_path / "b.csv",
        STATS_HEADER,
        v1_row(1, "1.0") + ",500,6.8,,,",
        v1_row(2, "1.0") + ",,,,0.95,1.05",  # quartiles but no sample count: gate alone
        v1_row(3, "1.0") + ",500,6.8,5.0,,",  # drift_pct wins over the notch rule
        v1_row(4, "1.0") + ",4,6.8,,,",  # 4 samples: 1.57 * 6.8 / 2 = 5.3 % per side
    )
    cand = write(
        tmp_path / "c.csv",
        STATS_HEADER,
        v1_row(1, "1.066") + ",500,6.8,,,",
        v1_row(2, "1.066") + ",,,,1.0,1.1",
        v1_row(3, "1.066") + ",500,6.8,5.0,,",
        v1_row(4, "1.066") + ",4,6.8,,,",
    )
    code, _ = regress(tmp_path, [base], [cand], gate=5)
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert "Case states: regression=2, within noise=2" in text
    assert "time\\_ms +6.60% past the 5% gate; medians' uncertainty ±0.68%" in text
    assert "seq\\_len\\_kv" in text
    matched = text[text.index("## Matched Cases") :]
    assert matched.count("| within noise |") == 2  # batch 3 (±7.07 %) and 4 (±7.55 %)
    assert "batch\\_size=3" in matched.split("| within noise |")[0].rsplit("\n", 1)[-1]


def test_noise_from_quartiles_when_noise_pct_absent(tmp_path):
    header = V1_HEADER + ",samples,time_q1_ms,time_q3_ms"
    base = write(tmp_path / "b.csv", header, v1_row(1, "1.0") + ",16,0.8,1.2")
    cand = write(tmp_path / "c.csv", header, v1_row(1, "1.08") + ",16,0.86,1.3")
    # 1.57 * 40 % / 4 = 15.7 %; 1.57 * (44/1.08) % / 4 = 15.99 %: root sum of squares 22.41 %
    assert regress(tmp_path, [base], [cand], gate=5)[0] == sr.EXIT_OK
    assert "medians' uncertainty ±22.41%" not in report(tmp_path)  # within noise: not listed
    assert "Case states: within noise=1" in report(tmp_path)


def test_environment_per_side_and_mismatch_warning(tmp_path):
    header = V1_HEADER + ",device,flashinfer_version,timer"
    base = write(tmp_path / "b.csv", header, v1_row(1) + ",NVIDIA H100,0.6.1,profiler")
    cand = write(tmp_path / "c.csv", header, v1_row(1) + ",NVIDIA H200,0.6.1,cuda_graph")
    regress(tmp_path, [base], [cand])
    text = report(tmp_path)
    warning = text.index("Warning: baseline and candidate ran on different hardware")
    assert warning < text.index("- Baseline files:")
    assert "device: NVIDIA H100 → NVIDIA H200" in text
    assert "| timer | profiler | cuda\\_graph |" in text
    assert "flashinfer\\_version:" not in text[: warning + 300]


def test_baseline_from_an_older_harness_warns_and_same_version_does_not(tmp_path):
    old_header = V1_HEADER + ",timer"
    new_header = V1_HEADER + ",timer,harness_version"
    old = write(tmp_path / "old.csv", old_header, v1_row(1) + ",profiler")
    new = write(tmp_path / "new.csv", new_header, v1_row(1) + ",profiler,0.2.0")
    again = write(tmp_path / "again.csv", new_header, v1_row(1) + ",profiler,0.2.0")
    regress(tmp_path, [old], [new])
    assert "harness\\_version: before 0.2.0 (not recorded) → 0.2.0" in report(tmp_path)
    regress(tmp_path, [new], [again])
    assert "Warning: baseline and candidate" not in report(tmp_path)


def test_peak_artefacts_flagged_and_not_counted_as_speed(tmp_path):
    header = V1_HEADER + ",pct_peak_bw"
    path = write(
        tmp_path / "a.csv",
        header,
        v1_row(1, "1.0", "9000") + ",180",
        v1_row(2, "1.0", "500") + ",10",
    )
    assert summarize(tmp_path, path)[0] == sr.EXIT_OK
    text = report(tmp_path)
    assert "- Maximum bandwidth_GB_s: 500 (batch\\_size=2" in text
    assert "## Measurement Artefacts" in text and "| 9000 | 180 | n/a |" in text
    assert "Measurement artefacts: 1 row above 100% of a hardware peak" in text


# --------------------------------------------------------- size, JSON, files


def big_pair(tmp_path: Path, rows: int) -> tuple[Path, Path]:
    lines_b = [V1_HEADER] + [v1_row(1, "1.0", kv=str(i)) for i in range(rows)]
    lines_c = [V1_HEADER] + [v1_row(1, "1.5", kv=str(i)) for i in range(rows)]
    return write(tmp_path / "b.csv", *lines_b), write(tmp_path / "c.csv", *lines_c)


def test_report_is_cut_to_the_size_limit_and_json_is_complete(tmp_path):
    base, cand = big_pair(tmp_path, 400)
    json_path = tmp_path / "r.json"
    code, _ = regress(
        tmp_path, [base], [cand], gate=5, extra=["--max-report-bytes", "8192", "--json", json_path]
    )
    size = (tmp_path / "report.md").stat().st_size
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert size <= 8192
    assert "*Cut: " in text and "of 400 matched cases shown" in text
    assert "**Verdict: FAIL** — 400 regression" in text
    data = json.loads(json_path.read_text())
    assert len(data["matched"]) == 400 and data["exit_code"] == 1
    assert {row["state"] for row in data["matched"]} == {"regression"}


def test_no_temporary_files_are_left(tmp_path):
    summarize(tmp_path, SEED_V1, extra=["--json", tmp_path / "r.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "report.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "r.json").chmod(0o640)
    summarize(tmp_path, SEED_V1, extra=["--json", tmp_path / "r.json"])
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o640


def test_device_outputs_are_written_not_replaced(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    code = sr.main([str(SEED_V1), "--output", str(fifo)])
    out, _ = reader.communicate(timeout=30)
    assert code == sr.EXIT_OK
    assert out.startswith("# FlashInfer Benchmark Summary")
    assert fifo.is_fifo()


def test_symlinked_output_replaces_the_target(tmp_path):
    target = tmp_path / "real.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert sr.main([str(SEED_V1), "--output", str(link)]) == sr.EXIT_OK
    assert link.is_symlink() and target.read_text().startswith("# FlashInfer Benchmark Summary")


@pytest.mark.parametrize("target", ["file_parent", "directory"])
def test_bad_output_location_exits_two_without_traceback(tmp_path, capsys, target):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    output = blocker / "r.md" if target == "file_parent" else tmp_path
    code = sr.main([str(SEED_V1), "--output", str(output)])
    err = capsys.readouterr().err
    assert code == sr.EXIT_INPUT_ERROR
    assert "cannot write summary report" in err
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["a.csv", "--baseline", "b.csv", "--candidate", "c.csv"],
        ["--baseline", "b.csv"],
        ["a.csv", "--fail-on-regression", "5"],
        ["--baseline", "b", "--candidate", "c", "--fail-on-regression", "nan"],
        ["--baseline", "b", "--candidate", "c", "--fail-on-regression", "-1"],
        ["a.csv", "--max-report-bytes", "10"],
    ],
)
def test_bad_arguments_exit_two(argv):
    with pytest.raises(SystemExit) as raised:
        sr.parse_args(argv)
    assert raised.value.code == 2


# -------------------------------------------------------------------- plots


class FakePlots:
    """Stands in for plots: records what it was given, returns PNG paths."""

    PLOT_FILE_SUFFIXES = ("_time.png", "speedup.png")

    def __init__(self):
        self.calls = []

    def render_summary_plots(self, rows, out_dir):
        self.calls.append(("summary", rows))
        return [Path(out_dir) / "summary_time.png"]

    def render_regression_plots(self, matched, gate_pct, out_dir):
        self.calls.append(("regression", matched, gate_pct))
        return [Path(out_dir) / "speedup.png"]


def test_plot_links_are_relative_to_the_report(tmp_path, monkeypatch):
    fake = FakePlots()
    monkeypatch.setitem(sys.modules, "fi_attn_bench.summarizer.plots", fake)
    output = tmp_path / "reports" / "summary.md"
    code = sr.main([str(NEW), "--output", str(output), "--plot-dir", str(tmp_path / "plots")])
    assert code == sr.EXIT_OK
    assert "![../plots/summary\\_time.png](../plots/summary_time.png)" in output.read_text()
    rows = fake.calls[0][1]
    expected = {
        "api",
        "batch_size",
        "status",
        "time_ms",
        "bandwidth_GB_s",
        "tflops",
        "arithmetic_intensity",
        "pct_peak_bw",
        "pct_peak_tflops",
        "case_label",
    }
    assert expected <= set(rows.columns)
    assert rows["arithmetic_intensity"].iloc[0] == pytest.approx(2.0)  # flops / io_bytes
    # the ceilings the rows' pct_peak_* were computed against, for the roofline's lines
    peaks = rows.attrs["peaks"]
    assert peaks["bandwidth_GB_s"] == pytest.approx(638.1 * 100 / 13.3)  # median of 3 rows
    assert peaks["tflops"] == pytest.approx(1.276 * 100 / 0.13)
    code = sr.main(
        [
            "--baseline",
            str(SEED_V1),
            "--candidate",
            str(NEW),
            "--output",
            str(output),
            "--plot-dir",
            str(tmp_path / "plots"),
            "--fail-on-regression",
            "50",
        ]
    )
    kind, matched, gate = fake.calls[1]
    assert (kind, gate) == ("regression", 50.0)
    assert list(matched.columns) == ["api", "case_label", "state", "speedup"]
    assert matched["speedup"].tolist() == pytest.approx([1.25, 0.1 / 0.105, 2.0])


def test_plot_dir_without_matplotlib_exits_two(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = sr.main(
        [str(SEED_V1), "--output", str(tmp_path / "r.md"), "--plot-dir", str(tmp_path / "p")]
    )
    assert code == sr.EXIT_INPUT_ERROR
    assert "needs matplotlib" in capsys.readouterr().err


def test_module_import_needs_neither_torch_nor_matplotlib(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['matplotlib'] = None; "
        "import summarize_results; "
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None; "
        f"sys.exit(summarize_results.main([{str(SEED_V1)!r}, '--output', {str(tmp_path / 'r.md')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_writer_header_round_trips(tmp_path):
    header = ",".join(
        csv_fieldnames(
            ["batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim"]
        )
    )
    assert header.split(",")[:14] == V1_HEADER.split(",")[:8] + V1_HEADER.split(",")[8:]
    row = v1_row(1) + "," * (len(header.split(",")) - 14)
    assert summarize(tmp_path, write(tmp_path / "w.csv", header, row))[0] == sr.EXIT_OK


def test_seed_record_helpers_work_on_hand_built_records():
    records = [
        {
            "api": "A",
            "batch_size": "1",
            "status": "ok",
            "time_ms": 2.0,
            "bandwidth_GB_s": 5.0,
            "tflops": 1.0,
            "_source": "x",
            "_line": 2,
        },
        {
            "api": "A",
            "batch_size": "1",
            "status": "ok",
            "time_ms": 1.0,
            "bandwidth_GB_s": 9.0,
            "tflops": 1.0,
            "_source": "y",
            "_line": 3,
        },
        {
            "api": "B",
            "batch_size": "2",
            "status": "failed",
            "time_ms": "",
            "bandwidth_GB_s": "",
            "tflops": "",
            "error_type": "E",
            "error": "m",
            "_source": "y",
            "_line": 4,
        },
    ]
    assert list(face.group_by_api(records)) == ["A", "B"]
    assert face.best_record(records, "time_ms")["_source"] == "y"
    assert face.best_record(records[2:], "tflops") is None
    index, issues = face.build_case_index(records, "candidate")
    assert list(index) == [("B", (("batch_size", "2"),))]
    assert [i.message for i in issues] == ["duplicate case also found at x:2: A (batch_size=1)"]
    result = face.LoadResult("input", ["x", "y"], records=records)
    markdown = face.build_summary_markdown(result)
    assert "- Valid files: 2" in markdown and "- Total rows: 3" in markdown
    assert "- Minimum time_ms: 1 (batch\\_size=1; source=y)" in markdown
    assert "| y | 2 | failed=1, ok=1 |" in markdown
    assert "**Verdict: INVALID INPUT**" in markdown  # A batch_size=1 is in x and y
    assert "y: duplicate case also found at x:2: A (batch\\_size=1)" in markdown


def test_summary_json_holds_every_row(tmp_path):
    json_path = tmp_path / "s.json"
    legacy = tmp_path / "legacy.csv"  # other cases than NEW's: a repeated case is an input error
    legacy.write_text(LEGACY.read_text().replace(",1,", ",2,"), encoding="utf-8")
    assert summarize(tmp_path, NEW, legacy, extra=["--json", json_path])[0] == sr.EXIT_OK
    data = json.loads(json_path.read_text())
    assert data["verdict"] == "pass" and data["exit_code"] == 0 and data["total_rows"] == 6
    assert len(data["frame"]) == 6 and data["legacy_rows"] == 3
    assert data["environment"]["device"] == ["NVIDIA H200"]


def test_every_long_list_is_cut_under_the_limit(tmp_path):
    header = V1_HEADER + ",device"
    rows = [v1_row(i, api=f"api{i}", kv=str(i)) + f",GPU model {i}" for i in range(1500)]
    rows += [
        v1_row(i, "", "", "", "failed", "e" * 50, api=f"api{i}", kv="x") + ",x" for i in range(300)
    ]
    path = write(tmp_path / "many.csv", header, *rows)
    code, _ = summarize(tmp_path, path, extra=["--max-report-bytes", "8192"])
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert len(text.encode()) <= 8192
    assert "(+1493 more)" in text  # 1501 device names, 8 shown
    assert "of 300 failures shown" in text and "of 1500 API sections shown" in text
    assert text.index("**Verdict: FAIL** — 300 of 1800 cases failed") < 200


def test_unexpected_errors_are_one_line_exit_two(tmp_path, capsys, monkeypatch):
    def broken(result, *options):
        raise RuntimeError("boom")

    monkeypatch.delenv("SUMMARIZE_DEBUG", raising=False)
    monkeypatch.setattr(sr, "summarize", broken)
    assert sr.main([str(SEED_V1), "--output", str(tmp_path / "r.md")]) == sr.EXIT_INPUT_ERROR
    assert capsys.readouterr().err == "error: internal error: RuntimeError: boom\n"
    monkeypatch.setenv("SUMMARIZE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        sr.main([str(SEED_V1), "--output", str(tmp_path / "r.md")])


def test_legacy_file_with_error_columns_clears_them(tmp_path):
    header = "api,batch_size,seq_len,num_heads,head_dim_ckv,head_dim_kpe,time_ms,bandwidth_GB_s,tflops,error"
    path = write(tmp_path / "l.csv", header, "MLA,1,128,16,512,64,1.0,2.0,3.0,stale")
    records, issues = face.load_csv(path)
    assert issues == []
    assert list(records[0])[-6:] == [
        "error",
        "schema_version",
        "status",
        "error_type",
        "_source",
        "_line",
    ]
    assert records[0]["error"] == "" and records[0]["status"] == "legacy_inferred_ok"
    assert summarize(tmp_path, path)[0] == sr.EXIT_OK


@pytest.mark.parametrize(
    "body",
    [
        [v1_row(1, "1_000")],  # Python's float() accepts it, so the seed does
        [v1_row(1) + ",00"],  # an invalid optional cell is quoted as written
        [v1_row(1), "", v1_row(2)],  # blank lines are skipped
        [v1_row(1), "   ", v1_row(2)],  # a whitespace-only line is a short row
        [v1_row(1, "", "", "", "failed", '"multi\nline, error"')],
        [v1_row(1, api=" Decode ")],
    ],
)
def test_reader_keeps_the_seeds_reading(tmp_path, body):
    """CR LF files with blank lines, odd numbers, padded cells and quoted line breaks read as
    the seed reads them (values and messages); an optional column's rule quotes its cell."""
    header = V1_HEADER + (",samples" if body[0].endswith(",00") else "")
    rows = [row if row.endswith(",00") or "samples" not in header else row + "," for row in body]
    path = write(tmp_path / "a.csv", header, *rows, newline="\r\n")
    records, issues = face.load_csv(path)
    if body[0].endswith(",00"):
        assert [i.message for i in issues] == [
            "line 2: samples must be a whole number >= 1, got '00'"
        ]
        return
    seed_records, seed_issues = seed_oracle.load_csv(path)
    assert [i.message for i in issues] == [i.message for i in seed_issues]
    assert records == seed_records
    if body[0] == v1_row(1, "1_000"):
        assert records[0]["time_ms"] == 1000.0


def test_a_failing_plot_still_writes_the_report(tmp_path, capsys, monkeypatch):
    fake = FakePlots()

    def broken(rows, out_dir):
        raise ValueError("no axes")

    fake.render_summary_plots = broken
    monkeypatch.setitem(sys.modules, "fi_attn_bench.summarizer.plots", fake)
    code = sr.main(
        [str(NEW), "--output", str(tmp_path / "r.md"), "--plot-dir", str(tmp_path / "p")]
    )
    assert code == sr.EXIT_INPUT_ERROR
    assert "plotting failed: ValueError: no axes" in capsys.readouterr().err
    assert (tmp_path / "r.md").read_text().startswith("# FlashInfer Benchmark Summary")


def test_regressions_worst_first_and_failures_not_crowded_out(tmp_path):
    base_rows = [v1_row(1, "1.0", kv=str(i)) for i in range(300)]
    cand_rows = [v1_row(1, f"{1.1 + i / 1000:.3f}", kv=str(i)) for i in range(300)]
    base_rows += [v1_row(2, "1.0", kv=str(i)) for i in range(5)]
    cand_rows += [v1_row(2, "", "", "", "failed", "oom", kv=str(i)) for i in range(5)]
    base = write(tmp_path / "b.csv", V1_HEADER, *base_rows)
    cand = write(tmp_path / "c.csv", V1_HEADER, *cand_rows)
    code, _ = regress(tmp_path, [base], [cand], gate=5, extra=["--max-report-bytes", "16384"])
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    regressions = text[text.index("## Regressions") : text.index("## Failure Details")]
    first = regressions.split("\n")[6]
    assert "seq\\_len\\_kv=299," in first and "time\\_ms +39.90%" in first
    failures = text[text.index("## Failure Details") :]
    assert failures.count("| candidate | Decode |") == 5
    assert len(text.encode()) <= 16384


# ---------------------------------------------- the reader against the seed's reading

OPT_HEADER = V1_HEADER + ",samples,noise_pct,timer,device,pct_peak_bw,pct_peak_tflops"
LEGACY_HEADER = "api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim," + (
    "time_ms,bandwidth_GB_s,tflops"
)


def opt_row(batch, time_ms="1.0", status="ok", err="", extra="100,2.5,profiler,NVIDIA H200,50,40"):
    return v1_row(batch, time_ms, status=status, err=err) + "," + extra


READER_CASES = {
    # the lines of a CSV file ("<NO-NEWLINE>": the line before it ends the file)
    # valid files
    "v1 with failures": (
        [V1_HEADER, v1_row(1), v1_row(2, "0.5"), v1_row(3, "", "", "", "failed", "oom")]
    ),
    "legacy": (
        [LEGACY_HEADER, "Decode,1,1,128,32,8,64,0.5,10,1", "Decode,2,1,128,32,8,64,0.25,20,2"]
    ),
    "optional, environment and artefacts": (
        [
            OPT_HEADER,
            opt_row(1),
            opt_row(2, "0.5", extra="100,,events,NVIDIA H100,150,40"),
            opt_row(3, "", "failed", "boom", extra=",,,,,"),
        ]
    ),
    "padded cells": (
        [
            V1_HEADER,
            v1_row(1, " 0.5 ", api=" Decode "),
            " 1 ," + v1_row(2)[2:].replace(",ok,", ", ok ,"),
        ]
    ),
    "space-only error of an ok row": ([V1_HEADER, v1_row(1) + " "]),
    "numbers float() reads": (
        [
            V1_HEADER,
            *(
                v1_row(i, t)
                for i, t in enumerate(
                    [
                        "1e-3",
                        "1_000",
                        ".5",
                        "5.",
                        "0.12345678901234567",
                        "+1",
                        "1E+02",
                        "00012.50",
                        "123456789012345",
                        "1234567890123456",
                        "9" * 30,
                        "0.000001",
                    ]
                )
            ),
        ]
    ),
    "failed rows with any metric text": (
        [V1_HEADER, v1_row(1, "abc", "inf", "-1", "failed", "x"), v1_row(2)]
    ),
    "ties keep the first row": ([V1_HEADER, v1_row(1, "1.0"), v1_row(2, "1.0"), v1_row(3, "1.00")]),
    "many APIs": ([V1_HEADER, *(v1_row(i, f"{1 + i % 3}", api=f"api{i % 4}") for i in range(12))]),
    "no final newline": ([V1_HEADER, v1_row(1), v1_row(2, "0.5") + "<NO-NEWLINE>"]),
    "last column differs at the end of the file": (
        [V1_HEADER + ",device", v1_row(1) + ",NVIDIA H200", v1_row(2) + ",NVIDIA H100"]
    ),
    "last cell empty, no final newline": (
        [V1_HEADER, v1_row(1), v1_row(2, "", "", "", "failed")[:-1] + "RuntimeError,<NO-NEWLINE>"]
    ),
    "short last value, no final newline": (
        [V1_HEADER + ",timer", v1_row(1) + ",events", v1_row(2) + ",wall<NO-NEWLINE>"]
    ),
    # invalid or odd files
    "ragged short row": ([V1_HEADER, v1_row(1), v1_row(2)[:-1]]),
    "ragged long row": ([V1_HEADER, v1_row(1) + ",x", v1_row(2)]),
    "short and long rows that balance": ([V1_HEADER, v1_row(1) + ",x", v1_row(2)[:-1]]),
    "blank line": ([V1_HEADER, v1_row(1), "", v1_row(2)]),
    "nan metric": ([V1_HEADER, v1_row(1, "nan")]),
    "inf metric": ([V1_HEADER, v1_row(1, "1", "inf")]),
    "negative metric": ([V1_HEADER, v1_row(1, "1", "-2")]),
    "zero time": ([V1_HEADER, v1_row(1, "0.000")]),
    "huge number": ([V1_HEADER, v1_row(1, "1e999")]),
    "unknown schema version": ([V1_HEADER, "2" + v1_row(1)[1:]]),
    "duplicate header": ([V1_HEADER + ",api", v1_row(1) + ",x"]),
    "padded header": ([V1_HEADER.replace("api", " api"), v1_row(1)]),
    "header only": ([V1_HEADER]),
    "status OK": ([V1_HEADER, v1_row(1, status="OK")]),
    "ok row with an error": ([V1_HEADER, v1_row(1) + "boom"]),
    "failed row with a space-only error": ([V1_HEADER, "1,Decode,1,1,128,32,8,64,failed,,,, , "]),
    "bad optional cells": ([OPT_HEADER, opt_row(1, extra="0,2.5,stopwatch,NVIDIA H200,50,40")]),
    "quoted cells as the harness writes them": (
        [
            V1_HEADER + ",repro,kernels",
            v1_row(1) + ',"bench.py --filter a=1,b=2","k<1, 2>;k2"',
            v1_row(2, "", "", "", "failed", '"x, ""y"""') + ',"r,1",""',
            '1,"Decode",3,1,128,32,8,64,ok,1.0,100,1,,,"a ""b"", c",k',
        ]
    ),
    "number columns read only to validate them": (
        [
            V1_HEADER + ",page_size,plan_ms,temp_start_C,shard",
            v1_row(1) + ",16,0.25,44,0",
            v1_row(2) + ",3.0,1e-3,-2.5,1",
            v1_row(3) + ",007, .5,0,2",
        ]
    ),
    "a count of zero": ([V1_HEADER + ",page_size", v1_row(1) + ",0"]),
    "a fractional count": ([V1_HEADER + ",page_size", v1_row(1) + ",2.5"]),
    "a negative time": ([V1_HEADER + ",plan_ms", v1_row(1) + ",-1"]),
    "quoted number": ([V1_HEADER, v1_row(1, '"1.5"')]),
    "stray quote": ([V1_HEADER, v1_row(1, "", "", "", "failed", 'x"y')]),
    "text after a closing quote": ([V1_HEADER, v1_row(1, "", "", "", "failed", '"x"y')]),
    "quoted commas and newlines": (
        [V1_HEADER, v1_row(1), v1_row(2, "", "", "", "failed", '"multi\nline, error"')]
    ),
    "non-ASCII text": ([V1_HEADER, v1_row(1, api="Décode")]),
}


# Messages of the rules registered optional columns have (the seed knows none of them).
OPTIONAL_RULES = {
    "a count of zero": ["line 2: page_size must be a whole number >= 1, got '0'"],
    "a fractional count": ["line 2: page_size must be a whole number >= 1, got '2.5'"],
    "a negative time": ["line 2: plan_ms must not be negative, got '-1'"],
    "bad optional cells": ["line 2: samples must be a whole number >= 1, got '0'"],
}


def _case_bytes(lines) -> bytes:
    text = "\n".join(lines) + "\n"
    return text.replace("<NO-NEWLINE>\n", "").encode("utf-8")


def _seed_comparable(path: Path) -> bool:
    """No registered optional column: the seed reads every column as we do."""
    header = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace").split(",")
    return not set(header) & set(OPTIONAL_COLUMN_NAMES)


def assert_read_as_the_seed_reads(path: Path) -> None:
    """Same messages; a valid file gives the seed's records (the seed keeps a failed row's
    metric text, we keep its number or nothing, as before the one reader)."""
    records, issues = face.load_csv(path)
    seed_records, seed_issues = seed_oracle.load_csv(path)
    assert [i.message for i in issues] == [i.message for i in seed_issues]
    ok = [r for r in records if r["status"] != "failed"]
    assert ok == [r for r in seed_records if r["status"] != "failed"]
    assert len(records) == len(seed_records)


@pytest.mark.parametrize("name", sorted(READER_CASES))
def test_reader_agrees_with_the_seed(tmp_path, name):
    path = tmp_path / "a.csv"
    path.write_bytes(_case_bytes(READER_CASES[name]))
    if _seed_comparable(path):
        assert_read_as_the_seed_reads(path)
    else:
        assert [i.message for i in face.load_csv(path)[1]] == OPTIONAL_RULES.get(name, [])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xef\xbb\xbf" + _case_bytes([V1_HEADER, v1_row(1)]),
        _case_bytes([V1_HEADER, v1_row(1), v1_row(2)]).replace(b"\n", b"\r\n"),
        _case_bytes([V1_HEADER, v1_row(1)]).replace(b"\n", b"\r", 1),
        _case_bytes([V1_HEADER, v1_row(1, api="D\xe9code")]).replace(b"\xc3\xa9", b"\xe9"),
        _case_bytes([V1_HEADER, v1_row(1)]).replace(b"Decode", b"De\x00code"),
        _case_bytes([V1_HEADER, v1_row(1), "", "", v1_row(2)]),
        b"\n" + _case_bytes([V1_HEADER, v1_row(1)]),
        _case_bytes([V1_HEADER, v1_row(1, "", "", "", "failed", '"a\r\nb, c"')]),
    ],
    ids=[
        "empty",
        "bom",
        "crlf",
        "lone cr",
        "latin-1",
        "nul",
        "blank lines",
        "blank first",
        "crlf in quotes",
    ],
)
def test_reader_agrees_with_the_seed_on_raw_bytes(tmp_path, data):
    path = tmp_path / "a.csv"
    path.write_bytes(data)
    assert_read_as_the_seed_reads(path)


def test_real_harness_csvs_are_read_whole(tmp_path):
    """The H100 CSVs (non-ASCII kernel names, quoted cells, full-precision floats,
    head-to-head, serving and run-condition columns): every row, every float as written."""
    for path in sorted(REAL_CSV.glob("*.csv")):
        records, issues = face.load_csv(path)
        assert issues == []
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert len(records) == len(rows) > 0
        assert any("…" in record["kernels"] for record in records)
        for record, row in zip(records, rows, strict=True):
            for name, text in row.items():
                expected = (float(text) if text else "") if is_numeric_column(name) else text
                assert record[name] == expected, (path.name, name)


def test_a_big_file_reads_in_many_chunks(tmp_path, capsys, monkeypatch):
    """More bytes than several chunks of the reader, the last row without its newline."""
    from fi_attn_bench.results import marked_stream

    monkeypatch.setattr(marked_stream, "CHUNK_BYTES", 1 << 12)
    rows = [
        v1_row(i % 7 + 1, f"{0.001 * (1 + i % 997):.6g}", f"{i * 0.37:.6g}", kv=str(i))
        if i % 500
        else v1_row(i % 7 + 1, "", "", "", "failed", f"error {i}", kv=str(i))
        for i in range(3000)
    ]
    path = tmp_path / "big.csv"
    path.write_bytes(_case_bytes([V1_HEADER, *rows[:-1], rows[-1] + "<NO-NEWLINE>"]))
    assert path.stat().st_size > 32 * (1 << 12)
    assert_read_as_the_seed_reads(path)
    code, _ = summarize(tmp_path, path, capsys=capsys)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert f"- Total rows: {len(rows)}" in report(tmp_path)


def test_escape_markdown_escapes_each_character_once_and_leaves_plain_text_alone():
    import random

    specials = {"\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "_": "\\_", "#": "\\#"}
    specials.update({"[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;"})

    def oracle(text):  # character by character, line breaks normalized to <br>
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return "<br>".join("".join(specials.get(c, c) for c in line) for line in lines)

    rng = random.Random(7)
    alphabet = "".join(specials) + "ab &<br>\r\n"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        assert face.escape_markdown(text) == oracle(text), repr(text)
    plain = "BatchDecodeWithPagedKVCacheWrapper 1.5 ok"
    assert face.escape_markdown(plain) == plain


# ------------------------------------------------------- comparisons


def regression_outcome(tmp_path, capsys, base, cand, extra=()):
    """(exit code, stdout, stderr, report) of one comparison."""
    code, captured = regress(tmp_path, base, cand, capsys=capsys, extra=extra)
    return code, captured.out, captured.err, report(tmp_path)


NOISY = V1_HEADER + ",noise_pct,time_q1_ms,time_q3_ms,device"
REGRESSION_CASES = {
    # (baseline files, candidate files, exit code without and with --fail-on-regression 5)
    "matched, missing, new, failed, recovered": (
        [[V1_HEADER, v1_row(1), v1_row(2, "", "", "", "failed", "oom"), v1_row(3), v1_row(4)]],
        [
            [V1_HEADER, v1_row(1, "1.2"), v1_row(2, "0.5"), v1_row(3, "", "", "", "failed", "x")]
            + [v1_row(5, "2")]
        ],
        (1, 1),
    ),
    "noise, quartiles and environment mismatch": (
        [[NOISY, v1_row(1) + ",1,,,H100", v1_row(2) + ",,0.9,1.1,H100", v1_row(3) + ",,,,H100"]],
        [
            [NOISY, v1_row(1, "1.5") + ",2,,,H200", v1_row(2, "1.1") + ",,1,1.2,H200"]
            + [v1_row(3, "1.02") + ",,,,H200"]
        ],
        (0, 1),
    ),
    "duplicates within and across files": (
        [[V1_HEADER, v1_row(1), v1_row(1, "2"), v1_row(2)], [V1_HEADER, v1_row(2, "3")]],
        [[V1_HEADER, v1_row(1), v1_row(2), v1_row(2), v1_row(2, "4")]],
        (2, 2),
    ),
    "legacy against v1, different case columns": (
        [[LEGACY_HEADER, "Decode,1,1,128,32,8,64,0.5,10,1", "MLA,2,1,128,32,8,64,0.25,20,2"]],
        [
            [V1_HEADER, v1_row(1, "0.6"), v1_row(2, api="MLA")],
            [
                "schema_version,api,batch_size,seq_len,num_qo_heads,num_kv_heads,head_dim,status,"
                "time_ms,bandwidth_GB_s,tflops,error_type,error",
                "1,Decode,1,128,32,8,64,ok,1,1,1,,",
            ],
        ],
        (0, 1),
    ),
    "long, padded, empty and odd case cells": (
        [
            [
                V1_HEADER,
                v1_row(" 1", kv="123456789012"),
                v1_row("", kv="12345678"),
                v1_row("a b", kv=" 7 "),
                v1_row("~", kv="7"),
                v1_row("Z", kv="\tx"),
            ]
        ],
        [
            [
                V1_HEADER,
                v1_row("1 ", "2", kv="123456789012"),
                v1_row("", kv="12345678"),
                v1_row("a b", "0.5", kv="7"),
                v1_row("~", kv=" 7"),
                v1_row("Z", kv="x"),
            ]
        ],
        (0, 1),
    ),
    "unknown case columns, some files lack them": (
        [[V1_HEADER + ",zeta,alpha", v1_row(1) + ",q,", v1_row(2) + ",,r"], [V1_HEADER, v1_row(3)]],
        [[V1_HEADER + ",alpha", v1_row(1) + ",", v1_row(2) + ",r", v1_row(3) + ",s"]],
        (1, 1),
    ),
    "failed rows with noise figures (noise_pct, quartiles)": (
        [
            [NOISY, v1_row(1, "", "", "", "failed", "oom") + ",2.5,,,", v1_row(2) + ",,,,"]
            + [v1_row(3, "1.0", "100", "1", "failed", "x") + ",,0.9,1.1,"]
        ],
        [[NOISY, v1_row(1) + ",,,,", v1_row(2, "", "", "", "failed", "y") + ",4,0.9,1.1,"]],
        (1, 1),
    ),
    "a case column named noise": (
        [[V1_HEADER + ",noise", v1_row(1) + ",a", v1_row(1, "2") + ",b", v1_row(2) + ",a"]],
        [[V1_HEADER + ",noise", v1_row(1, "1.5") + ",b", v1_row(1) + ",c", v1_row(2) + ","]],
        (1, 1),
    ),
    "columns named like internal ones (_line, _source, _x)": (
        [[V1_HEADER + ",_line,_source,_x", v1_row(1) + ",9,s,x", v1_row(1, "2") + ",9,s,y"]],
        [[V1_HEADER + ",_x,_line", v1_row(1) + ",x,1", v1_row(2) + ",y,1"]],
        (2, 2),
    ),
    "an invalid candidate file": (
        [[V1_HEADER, v1_row(1)]],
        [[V1_HEADER, v1_row(1, "nan")]],
        (2, 2),
    ),
    "a quoted baseline file": (
        [[V1_HEADER, v1_row(1, "", "", "", "failed", '"a, b"')]],
        [[V1_HEADER, v1_row(1)]],
        (0, 0),
    ),
    "a quoted line break": (
        [[V1_HEADER, v1_row(1, "", "", "", "failed", '"a\nb"')]],
        [[V1_HEADER, v1_row(1)]],
        (0, 0),
    ),
    "a number column of the environment role (shard)": (
        [[V1_HEADER, v1_row(1)]],
        [[V1_HEADER + ",shard", v1_row(1) + ",0"]],
        (0, 0),
    ),
    "quoted case cells": (
        [[V1_HEADER, '1,Decode,"1",1,128,32,8,64,ok,1.0,100,1,,']],
        [[V1_HEADER, v1_row(1, "1.2")]],
        (0, 1),
    ),
}


@pytest.mark.parametrize("name", sorted(REGRESSION_CASES))
def test_comparisons_exit_as_before(tmp_path, capsys, name):
    """Each case's exit code, without and with a gate; a whole report, no traceback."""
    base_files, cand_files, codes = REGRESSION_CASES[name]
    base = [write(tmp_path / f"b{i}.csv", *lines) for i, lines in enumerate(base_files)]
    cand = [write(tmp_path / f"c{i}.csv", *lines) for i, lines in enumerate(cand_files)]
    for extra, expected in zip(((), ("--fail-on-regression", "5")), codes, strict=True):
        code, _, err, text = regression_outcome(tmp_path, capsys, base, cand, extra)
        assert code == expected and "Traceback" not in err
        assert text.startswith("# FlashInfer Benchmark Regression") and text.endswith("\n")


def failure_labels(text: str) -> list[str]:
    """The Case cell of every row of a report's Failure Details table."""
    section = text.split("## Failure Details", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [row.split(" | ")[2] for row in rows[1:]]


def test_failed_rows_with_noise_are_labelled_by_case_parameters_only(tmp_path, capsys):
    """A failed row's noise figure (noise_pct, or quartiles over time_ms) is no case
    parameter: Failure Details label it like every other table."""
    base = write(
        tmp_path / "b.csv",
        NOISY,
        v1_row(1, "", "", "", "failed", "oom") + ",2.5,,,H200",
        v1_row(2, "1.0", "100", "1", "failed", "bad") + ",,0.9,1.1,H200",
    )
    cand = write(tmp_path / "c.csv", NOISY, v1_row(1) + ",1,,,H200", v1_row(2) + ",,0.9,1.1,H200")
    fast = regression_outcome(tmp_path, capsys, [base], [cand])
    assert fast[0] == sr.EXIT_OK  # both recovered
    case = (
        "seq\\_len\\_q=1, seq\\_len\\_kv=128, num\\_qo\\_heads=32, num\\_kv\\_heads=8, "
        "head\\_dim=64"
    )
    assert failure_labels(fast[3]) == [f"batch\\_size={b}, {case}" for b in (1, 2)]
    assert "noise=" not in fast[3]
    json_path = tmp_path / "r.json"
    assert regress(tmp_path, [base], [cand], extra=("--json", json_path))[0] == sr.EXIT_OK
    failures = json.loads(json_path.read_text(encoding="utf-8"))["failures"]
    assert [row["case"] for row in failures] == [
        f"batch_size={b}, {case.replace(chr(92), '')}" for b in (1, 2)
    ]


def test_a_case_column_named_noise_is_a_case_parameter(tmp_path, capsys):
    """A CSV column literally named noise (say a noise-injection knob) is a case
    parameter like any other: cases are matched and labelled by it."""
    header = V1_HEADER + ",noise,noise_pct"
    base = write(
        tmp_path / "b.csv",
        header,
        v1_row(1, "1.0") + ",0.1,1",
        v1_row(1, "2.0") + ",0.2,1",
        v1_row(2, "", "", "", "failed", "oom") + ",0.1,3",
    )
    cand = write(
        tmp_path / "c.csv",
        header,
        v1_row(1, "2.0") + ",0.2,1",
        v1_row(1, "1.5") + ",0.1,1",
        v1_row(2, "", "", "", "failed", "oom") + ",0.3,3",
    )
    code, _, err, text = regression_outcome(tmp_path, capsys, [base], [cand])
    assert code == sr.EXIT_BENCHMARK_FAILURE and err == ""  # no duplicate cases
    assert "| Decode | batch\\_size=1, seq\\_len\\_q=1" in text
    matched = text.split("## Matched Cases", 1)[1]
    assert "head\\_dim=64, noise=0.1 | compared | 1 → 1.5, +50.00%" in matched
    assert "head\\_dim=64, noise=0.2 | compared | 2 → 2, +0.00%" in matched
    labels = failure_labels(text)
    assert [label.rsplit(", ", 1)[1] for label in labels] == ["noise=0.1", "noise=0.3"]
    missing = text.split("## Missing Candidate Cases", 1)[1].split("\n## ", 1)[0]
    assert "batch\\_size=2" in missing and "noise=0.1" in missing


def test_comparison_of_big_runs_cut_to_the_limit(tmp_path, capsys):
    """Thousands of cases, duplicates and failures, a report cut to its byte limit."""
    rows = [v1_row(i % 9, f"{1 + i % 13}", kv=str(i // 9)) for i in range(4000)]
    base = write(tmp_path / "b.csv", V1_HEADER, *rows, v1_row(0, "5", kv="0"))
    cand_rows = [
        v1_row(i % 9, f"{1 + i % 7}", kv=str(i // 9))
        if i % 97
        else v1_row(i % 9, "", "", "", "failed", f"e{i}", kv=str(i // 9))
        for i in range(100, 4100)
    ]
    cand = write(tmp_path / "c.csv", V1_HEADER, *cand_rows)
    extra = ("--fail-on-regression", "5", "--max-report-bytes", "20000")
    fast = regression_outcome(tmp_path, capsys, [base], [cand], extra)
    assert fast[0] == sr.EXIT_INPUT_ERROR and "*Cut:" in fast[3]


# ------------------------------------------------ what a user meets


def test_a_huge_error_cell_is_clipped_and_its_case_named(tmp_path):
    """#4: a 5 MB error cell emptied the Failure Details table ("0 of 1 shown")."""
    huge = "x" * 5_000_000
    path = write(tmp_path / "a.csv", V1_HEADER, v1_row(1), v1_row(2, "", "", "", "failed", huge))
    assert summarize(tmp_path, path)[0] == sr.EXIT_BENCHMARK_FAILURE
    text = report(tmp_path)
    failures = text[text.index("## Failure Details") :]
    assert "| Decode | batch\\_size=2, " in failures
    assert "more characters; the CSV holds them all" in failures
    assert "0 of 1 failures shown" not in text and len(text) < 100_000


def test_report_to_stdout_with_dash_and_dev_stdout(tmp_path):
    """#7: `--output -` wrote a file named "-"; /dev/stdout failed on its temp file."""
    for target in ("-", "/dev/stdout"):
        result = subprocess.run(
            [sys.executable, str(ROOT / "summarize_results.py"), str(SEED_V1), "--output", target],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("# FlashInfer Benchmark Summary\n")
        assert "saved to" not in result.stdout and not (tmp_path / "-").exists()
    redirected = tmp_path / "out.md"
    with open(redirected, "w") as stream:
        command = [sys.executable, str(ROOT / "summarize_results.py"), str(SEED_V1)]
        subprocess.run(
            [*command, "--output", "/dev/stdout"],
            stdout=stream,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert redirected.read_text().startswith("# FlashInfer Benchmark Summary\n")


@pytest.mark.parametrize("option", ["--json", "--plot-dir", "--output"])
def test_an_unwritable_output_writes_nothing(tmp_path, capsys, option):
    """#12: `--json /proc/x.json` still wrote and announced out.md before exit 2."""
    out = tmp_path / "out.md"
    argv = [str(SEED_V1), "--output", str(out), option, "/proc/fi-attn-bench/x"]
    code = sr.main(argv)
    captured = capsys.readouterr()
    assert code == sr.EXIT_INPUT_ERROR
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "/proc/fi-attn-bench/x" in captured.err
    assert list(tmp_path.iterdir()) == []


def test_report_wording_order_and_large_changes(tmp_path, capsys):
    """#11: "9 regression"; within-noise rows in the Regressions table; text order
    (seq_len_kv=200 before 37); a 2x slowdown without a gate got a plain PASS."""
    kvs = ["37", "200", "1000"]
    base = write(tmp_path / "b.csv", V1_HEADER, *(v1_row(1, "1.0", kv=kv) for kv in kvs))
    cand = write(
        tmp_path / "c.csv",
        V1_HEADER,
        *(v1_row(1, t, kv=kv) for t, kv in zip(["2.0", "1.2", "1.01"], kvs, strict=True)),
    )
    code, out = regress(tmp_path, [base], [cand], gate=5, capsys=capsys)
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert "**Verdict: FAIL** — 2 regressions" in text
    matched = text[text.index("## Matched Cases") :]
    assert matched.index("seq\\_len\\_kv=37,") < matched.index("seq\\_len\\_kv=200,")
    assert matched.index("seq\\_len\\_kv=200,") < matched.index("seq\\_len\\_kv=1000,")
    regressions = text[text.index("## Regressions") : text.index("## Matched Cases")]
    assert regressions.index("kv=37,") < regressions.index("kv=200,")  # worst first
    assert out.out.startswith("Verdict: FAIL — 2 regressions\n")
    code, out = regress(tmp_path, [base], [cand], capsys=capsys)
    text = report(tmp_path)
    assert code == sr.EXIT_OK
    assert "2 cases 10% or more slower (not gated: no --fail-on-regression)" in text
    assert "## Large Changes (10% or more slower; not gated)" in text
    assert "- Case states: compared=3" in text and "## Regressions" not in text


def test_only_changed_and_stdout_table(tmp_path, capsys):
    base = write(tmp_path / "b.csv", V1_HEADER, *(v1_row(b, "1.0") for b in range(1, 6)))
    cand = write(
        tmp_path / "c.csv", V1_HEADER, v1_row(1, "1.5"), *(v1_row(b, "1.0") for b in range(2, 6))
    )
    code, out = regress(tmp_path, [base], [cand], gate=5, capsys=capsys, extra=["--only-changed"])
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    changed = text[text.index("## Changed Cases (--only-changed)") :]
    assert changed.count("| Decode |") == 1
    rows = [line for line in out.out.splitlines() if line.startswith("Decode")]
    assert len(rows) == 1 and rows[0].split()[-3:] == ["1", "1.5", "+50.00%"]


def test_directory_arguments_and_version(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "base" / "shard").mkdir(parents=True)
    write(runs / "base" / "a.csv", V1_HEADER, v1_row(1))
    write(runs / "base" / "shard" / "b.csv", V1_HEADER, v1_row(2))
    write(runs / "cand.csv", V1_HEADER, v1_row(1), v1_row(2))
    code, _ = summarize(tmp_path, runs / "base")
    assert code == sr.EXIT_OK and "- Total rows: 2" in report(tmp_path)
    code, _ = regress(tmp_path, [runs / "base"], [runs / "cand.csv"], gate=5)
    assert code == sr.EXIT_OK and "- Matched cases: 2" in report(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        sr.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"fi-attn-bench {HARNESS_VERSION}\n"


def test_environment_shows_run_metadata(tmp_path):
    """Run metadata in the environment section; a timestamp per row shows as its range."""
    header = V1_HEADER + ",host,git_commit,git_dirty,timestamp_utc"
    stamps = ["2026-12-04T10:00:07.5+00:00", "2026-12-04T10:00:00Z", "2026-12-04T09:59:59+00:00"]
    rows = [v1_row(b) + f",node7,abc123,no,{stamp}" for b, stamp in enumerate(stamps, 1)]
    path = write(tmp_path / "a.csv", header, *rows)
    summarize(tmp_path, path)
    text = report(tmp_path).replace("\\_", "_")
    for line in ("| host | node7 |", "| git_commit | abc123 |", "| git_dirty | no |"):
        assert line in text
    assert "| timestamp_utc | 2026-12-04T09:59:59+00:00 … 2026-12-04T10:00:07.5+00:00 |" in text


# ------------------------------------- identity defaults, samples, shards, impls


def test_old_baseline_without_impl_matches_new_rows(tmp_path, capsys):
    """A baseline without impl/workload matches impl=flashinfer, workload=""."""
    old = write(tmp_path / "old.csv", V1_HEADER, v1_row(1), v1_row(2))
    header = V1_HEADER.replace(",head_dim,", ",head_dim,impl,workload,")
    new_rows = [
        ",".join([*v1_row(b).split(",")[:8], "flashinfer", "", *v1_row(b).split(",")[8:]])
        for b in (1, 2)
    ]
    new = write(tmp_path / "new.csv", header, *new_rows)
    code, _ = regress(tmp_path, [old], [new], gate=5, capsys=capsys)
    text = report(tmp_path)
    assert code == sr.EXIT_OK, text
    assert "- Matched cases: 2" in text and "- New candidate cases: 0" in text
    assert "impl=flashinfer" in text


def _samples_file(path: Path, rows) -> Path:
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as stream:
        for batch, samples in rows:
            case = dict(
                zip(
                    [
                        "batch_size",
                        "seq_len_q",
                        "seq_len_kv",
                        "num_qo_heads",
                        "num_kv_heads",
                        "head_dim",
                    ],
                    [str(batch), "1", "128", "32", "8", "64"],
                    strict=True,
                )
            )
            record = {"api": "Decode", "case": case, "impl": "flashinfer", "samples_ms": samples}
            stream.write(json.dumps(record) + "\n")
    return path


def test_mann_whitney_matches_the_normal_approximation():
    from fi_attn_bench.summarizer.rank_test import mann_whitney_p

    # scipy.stats.mannwhitneyu(range(1, 6), range(6, 11), method="asymptotic") -> 0.01219
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(0.01219, abs=2e-5)
    # ties: [1, 2, 2, 3] vs [2, 3, 3, 4]: ranks 1, 3, 3, 6 -> U1 = 13 - 10 = 3, mean 8;
    # variance 16/12 * (9 - 2 * 24 / 56) = 10.857; z = (5 - 0.5) / 3.295 = 1.366 -> 0.1720
    assert mann_whitney_p([1, 2, 2, 3], [2, 3, 3, 4]) == pytest.approx(0.1720, abs=2e-4)
    assert mann_whitney_p([1, 1], [1, 1]) == 1.0
    assert math.isnan(mann_whitney_p([], [1.0]))


def test_rank_test_on_raw_samples_decides_significance(tmp_path, capsys):
    """With samples of both sides the rank test calls the change, not the
    medians' interval (these rows state none, so the gate alone would flag both)."""
    base = write(tmp_path / "b.csv", V1_HEADER, v1_row(1, "1.0"), v1_row(2, "1.0"))
    cand = write(tmp_path / "c.csv", V1_HEADER, v1_row(1, "1.1"), v1_row(2, "1.1"))
    rng = np.random.default_rng(1)
    base_samples = [
        (1, (1.0 + 0.01 * rng.standard_normal(50)).tolist()),
        (2, (1.0 + 0.5 * rng.random(50)).tolist()),
    ]
    cand_samples = [
        (1, (1.1 + 0.01 * rng.standard_normal(50)).tolist()),
        (2, (1.0 + 0.5 * rng.random(50)).tolist()),
    ]
    (tmp_path / "bs").mkdir()
    _samples_file(tmp_path / "bs" / "b.samples.jsonl.gz", base_samples)
    cs = _samples_file(tmp_path / "c.samples.jsonl.gz", cand_samples)
    extra = ["--baseline-samples", tmp_path / "bs", "--candidate-samples", cs]
    code, _ = regress(tmp_path, [base], [cand], gate=5, capsys=capsys, extra=extra)
    text = report(tmp_path)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    assert "Case states: regression=1, within noise=1" in text
    regressions = text[text.index("## Regressions") : text.index("## Matched Cases")]
    assert "batch\\_size=1," in regressions and "Mann–Whitney p = " in regressions
    assert regress(tmp_path, [base], [cand], gate=5)[0] == sr.EXIT_BENCHMARK_FAILURE


def test_a_bad_samples_file_is_one_line_exit_two(tmp_path, capsys):
    base = write(tmp_path / "b.csv", V1_HEADER, v1_row(1))
    bad = tmp_path / "x.samples.jsonl.gz"
    bad.write_text("not gzip")
    extra = ["--baseline-samples", bad, "--candidate-samples", bad]
    code, out = regress(tmp_path, [base], [base], capsys=capsys, extra=extra)
    assert code == sr.EXIT_INPUT_ERROR
    assert out.err.count("\n") == 1 and "not a readable gzip samples file" in out.err
    assert not (tmp_path / "report.md").exists()
    empty = _samples_file(tmp_path / "e.samples.jsonl.gz", [(1, [])])
    extra = ["--baseline-samples", empty, "--candidate-samples", empty]
    code, out = regress(tmp_path, [base], [base], capsys=capsys, extra=extra)
    assert code == sr.EXIT_INPUT_ERROR and "samples_ms must be a non-empty list" in out.err


def test_shards_merge_and_a_missing_shard_is_an_incomplete_run(tmp_path, capsys):
    header = V1_HEADER + ",shard,num_shards"
    shards = [
        write(tmp_path / f"s{index}.csv", header, v1_row(index + 1) + f",{index},4")
        for index in range(4)
    ]
    code, _ = summarize(tmp_path, *shards, capsys=capsys)
    assert code == sr.EXIT_OK and "- Total rows: 4" in report(tmp_path)
    code, out = regress(tmp_path, shards, [shards[0], *shards[2:]], capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert (
        "candidate: (all files of the run): incomplete sharded run: shard 1 of 4 missing" in out.err
    )
    twice = write(tmp_path / "again.csv", header, v1_row(1) + ",1,4")
    code, out = summarize(tmp_path, *shards, twice, capsys=capsys)
    assert code == sr.EXIT_INPUT_ERROR
    assert f"{twice}: duplicate case also found at {shards[0]}:2" in out.err


def test_run_conditions_that_differ_are_named_next_to_the_case(tmp_path):
    header = V1_HEADER + ",power_capped_pct,sm_clock_mean_MHz"
    base = write(tmp_path / "b.csv", header, v1_row(1) + ",10,1980", v1_row(2) + ",10,1980")
    cand = write(
        tmp_path / "c.csv", header, v1_row(1, "1.1") + ",85,1700", v1_row(2, "1.01") + ",15,1970"
    )
    assert regress(tmp_path, [base], [cand], gate=5)[0] == sr.EXIT_BENCHMARK_FAILURE
    text = report(tmp_path)
    verdict = text.split("\n")[2]
    assert "1 case ran under different conditions (clock or power limit)" in verdict
    row = next(line for line in text.splitlines() if line.startswith("| Decode | batch\\_size=1"))
    assert "power-capped 10% → 85%; SM clock 1980 → 1700 MHz" in row


def test_head_to_head_table_for_several_implementations(tmp_path):
    """One run, two impls: times side by side, speedup (1 / the paired ratio
    where there is one) with its paired interval and verdict, winner, geomean per API."""
    header = V1_HEADER.replace(",head_dim,", ",head_dim,impl,") + (
        ",baseline_impl,paired_ratio,paired_ratio_lo,paired_ratio_hi,paired_verdict"
    )

    def row(batch, impl, time_ms, paired=",,,"):
        cells = v1_row(batch, time_ms).split(",")
        return ",".join([*cells[:8], impl, *cells[8:]]) + f",fa2,{paired}"

    path = write(
        tmp_path / "h.csv",
        header,
        row(1, "fa2", "1.0"),
        row(1, "fa3", "0.5", "0.52,0.45,0.55,faster"),  # the paired estimate, not the times'
        row(2, "fa2", "1.0"),
        row(2, "fa3", "2.0", "2.0,1.9,2.1,slower"),
        row(3, "fa2", "1.0"),
        row(3, "fa3", "0.99", "0.99,0.98,1.003,same"),  # lower time, but not told apart
    )
    assert summarize(tmp_path, path)[0] == sr.EXIT_OK
    text = report(tmp_path)
    table = text[text.index("## Head to Head: Decode") :]
    assert "| Case | fa2 ms | fa3 ms | fa3 speedup | Winner |" in table
    assert "| 1 | 0.5 | 1.9231x [1.818, 2.222] faster | fa3 |" in table
    assert "impl=" not in table.split("## Case Results")[0]  # cases named without impl
    assert "| 1 | 2 | 0.5000x [0.476, 0.526] slower | fa2 |" in table
    assert "| 1 | 0.99 | 1.0101x [0.997, 1.020] same | tie |" in table
    assert "Geomean speedup over fa2: fa3 0.9903x" in table  # (1/0.52 * 1/2 * 1/0.99)^(1/3)
    assert "Verdicts against fa2: fa3 1 faster, 1 same, 1 slower" in table


@pytest.mark.parametrize(
    ("times", "verdicts", "winner"),
    [
        ((1.0, 0.9, 1.1), ("", "faster", "slower"), "b"),
        ((1.0, 0.9, 1.1), ("", "same", "slower"), "tie"),
        ((1.0, 1.2, 1.1), ("", "slower", "slower"), "a"),
        ((1.0, 1.2, 1.1), ("", "slower", "same"), "tie"),
        ((1.0, 0.9, 1.1), ("", "", ""), "b"),  # separate sweeps: the lowest time
    ],
)
def test_the_winner_is_the_fastest_only_where_the_verdicts_back_it(times, verdicts, winner):
    from fi_attn_bench.summarizer.headtohead import ImplResult, case_winner

    results = [
        ImplResult(impl, time, 1.0, math.nan, math.nan, verdict)
        for impl, time, verdict in zip("abc", times, verdicts, strict=True)
    ]
    assert case_winner(results, "a") == winner


def test_the_winners_of_all_cases_at_once_are_case_winner_of_each():
    """case_winners (the columnar model's) agrees with case_winner on every mix of present
    implementations, tied times and verdicts."""
    import random

    from fi_attn_bench.summarizer.headtohead import ImplResult, case_winner, case_winners

    rng = random.Random(7)
    impls = ["a", "b", "c", "d"]
    present = np.zeros((3000, 4), dtype=bool)
    times = np.full((3000, 4), np.nan)
    verdicts = np.full((3000, 4), "", dtype=object)
    expected = []
    for case in range(3000):
        results = []
        for column, impl in enumerate(impls):
            if column and rng.random() < 0.3:
                continue
            time_ms = rng.choice([0.5, 1.0, 1.0, 2.0])  # ties: the first of the lowest wins
            verdict = "" if column == 0 else rng.choice(["", "faster", "same", "slower"])
            present[case, column], times[case, column] = True, time_ms
            verdicts[case, column] = verdict
            results.append(ImplResult(impl, time_ms, 1.0, math.nan, math.nan, verdict))
        expected.append(case_winner(results, "a"))
    assert case_winners(impls, times, verdicts, present).tolist() == expected


def test_head_to_head_cases_are_listed_in_json_as_in_the_report(tmp_path):
    """The columnar case table gives the JSON report one object per case, its results
    in implementation order and the absent implementation left out."""
    header = V1_HEADER.replace(",head_dim,", ",head_dim,impl,")

    def row(batch, impl, time_ms):
        cells = v1_row(batch, time_ms).split(",")
        return ",".join([*cells[:8], impl, *cells[8:]])

    path = write(
        tmp_path / "h.csv",
        header,
        row(1, "fa2", "1.0"),
        row(1, "fa3", "0.5"),
        row(2, "fa2", "2.0"),
        row(3, "fa3", "1.0"),  # no baseline: not compared
    )
    code = sr.main(
        [str(path), "--output", str(tmp_path / "s.md"), "--json", str(tmp_path / "s.json")]
    )
    assert code == sr.EXIT_OK
    (api,) = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["head_to_head"]
    assert api["impls"] == ["fa2", "fa3"] and api["geomean_speedup"]["fa3"] == 2.0
    assert [case["case"].split(",")[0] for case in api["cases"]] == ["batch_size=1", "batch_size=2"]
    first, second = api["cases"]
    assert [r["impl"] for r in first["results"]] == ["fa2", "fa3"] and first["winner"] == "fa3"
    assert first["results"][1]["speedup"] == 2.0 and first["results"][1]["speedup_lo"] is None
    assert [r["impl"] for r in second["results"]] == ["fa2"] and second["winner"] == "fa2"


def test_head_to_head_labels_made_a_block_at_a_time_name_each_case(tmp_path, monkeypatch):
    """Case labels are made as cases are read, a block at a time: across block boundaries,
    read in any order, each case keeps its own label."""
    from fi_attn_bench.summarizer import headtohead
    from fi_attn_bench.summarizer.frames import FrameView, side_frame
    from fi_attn_bench.summarizer.loading import load_run

    monkeypatch.setattr(headtohead, "LABEL_BLOCK", 2)
    header = V1_HEADER.replace(",head_dim,", ",head_dim,impl,")

    def row(batch, impl):
        cells = v1_row(batch).split(",")
        return ",".join([*cells[:8], impl, *cells[8:]])

    batches = [7, 3, 5, 1, 9]
    rows = [row(batch, impl) for batch in batches for impl in ("fa2", "fa3")]
    view = FrameView(side_frame(load_run([write(tmp_path / "h.csv", header, *rows)])))
    (api,) = headtohead.head_to_head(view, None)
    expected = [f"batch_size={batch}" for batch in sorted(batches)]
    assert [api.cases[index].case.split(",")[0] for index in (4, 0, 3, 1, 2)] == [
        expected[index] for index in (4, 0, 3, 1, 2)
    ]
    assert [label.split(",")[0] for label in api.cases.labels] == expected


def test_grown_real_csvs_summarize_and_compare(tmp_path, capsys):
    """benchmarks/gen_csvs.py grows a real CSV (the benchmark's input): its rows read as
    the template's do, a failed row every 700, the candidate's slower cases regress."""
    from benchmarks import gen_csvs

    template = REAL_CSV / "h100_ragged_fa2_vs_fa3.csv"
    base, cand = tmp_path / "b.csv", tmp_path / "c.csv"
    for path, extra in ((base, []), (cand, ["--candidate"])):
        gen_csvs.main(
            ["--template", str(template), "--rows", "3000", "--out", str(path)]
            + ["--failed-every", "700", *extra]
        )
    assert "…" in base.read_text(encoding="utf-8")
    code, _ = summarize(tmp_path, base, capsys=capsys)
    assert code == sr.EXIT_BENCHMARK_FAILURE
    text = report(tmp_path)
    assert "- Total rows: 3000" in text and "## Head to Head" in text
    code, out = regress(tmp_path, [base], [cand], gate=5, capsys=capsys)
    assert code == sr.EXIT_BENCHMARK_FAILURE and "regression=" in report(tmp_path)


def test_head_to_head_verdicts_merge_with_a_file_without_them(tmp_path, capsys):
    """A run with paired verdicts summarized together with one of other impls that has no
    verdict column: one table, the old file's cases
    won by lowest time."""
    impl_header = V1_HEADER.replace(",head_dim,", ",head_dim,impl,")

    def row(batch, impl, time_ms, tail=""):
        cells = v1_row(batch, time_ms).split(",")
        return ",".join([*cells[:8], impl, *cells[8:]]) + tail

    paired = write(
        tmp_path / "p.csv",
        impl_header + ",baseline_impl,paired_ratio,paired_ratio_lo,paired_ratio_hi,paired_verdict",
        row(1, "fa2", "1.0", ",fa2,,,,"),
        row(1, "fa3", "0.99", ",fa2,0.99,0.98,1.003,same"),
    )
    plain = write(tmp_path / "q.csv", impl_header, row(2, "fa2", "1.0"), row(2, "fa3", "0.5"))
    code, captured = summarize(tmp_path, paired, plain, capsys=capsys)
    fast = (code, captured.out, captured.err, report(tmp_path))
    assert fast[0] == sr.EXIT_OK
    table = fast[3][fast[3].index("## Head to Head: Decode") :]
    assert "| 1 | 0.99 | 1.0101x [0.997, 1.020] same | tie |" in table
    assert "| 1 | 0.5 | 2.0000x | fa3 |" in table  # fa2 1 ms, fa3 0.5 ms, no verdict


def test_natural_codes_give_every_run_one_code_space_in_natural_order():
    """Two runs' (codes, texts): shared texts get one code, codes follow natural order, -1
    (absent) stays -1."""
    import random

    from fi_attn_bench.summarizer.identity import natural_codes, natural_key

    rng = random.Random(5)
    pool = ["1", "01", "1.0", "2", "10", "abc", "", "-3", "2.5", "inf", "x y"]
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(1, 3)):
            texts = rng.sample(pool, rng.randint(0, len(pool)))
            codes = np.array([rng.randint(-1, len(texts) - 1) for _ in range(20)], np.int64)
            parts.append((codes, texts))
        joined, texts = natural_codes(parts)
        union = {text for _, part_texts in parts for text in part_texts}
        assert texts == sorted(union, key=natural_key)
        expected = [
            texts.index(part_texts[code]) if code >= 0 else -1
            for codes, part_texts in parts
            for code in codes.tolist()
        ]
        assert joined.tolist() == expected


def test_frame_codes_give_one_code_to_values_equal_once_stripped():
    """Object and categorical columns alike: " 8" and "8" are one value, so one run's texts
    are distinct, as natural_codes' one-run path takes them to be; empty impl is its default."""
    import pandas as pd

    from fi_attn_bench.results.schema import IDENTITY_DEFAULTS
    from fi_attn_bench.summarizer.identity import frame_codes, natural_codes

    cells = [" 8", "8", "16", "8 ", "16"]
    for column in (pd.Series(cells, dtype=object), pd.Series(cells, dtype="category")):
        codes, texts = frame_codes(pd.DataFrame({"batch_size": column}), "batch_size")
        assert sorted(texts) == ["16", "8"]
        assert [texts[code] for code in codes] == ["8", "8", "16", "8", "16"]
        joined, ordered = natural_codes([(codes, texts)])
        assert ordered == ["8", "16"] and joined.tolist() == [0, 0, 1, 0, 1]
    impl = pd.DataFrame(
        {"impl": pd.Series(["", "fa3", IDENTITY_DEFAULTS["impl"]], dtype="category")}
    )
    codes, texts = frame_codes(impl, "impl")
    assert [texts[code] for code in codes] == [
        IDENTITY_DEFAULTS["impl"],
        "fa3",
        IDENTITY_DEFAULTS["impl"],
    ]
    assert len(set(texts)) == len(texts)


def test_natural_sorted_orders_as_the_natural_key_does():
    """The numeric fast path gives sorted(key=natural_key), odd numbers and text included."""
    import random

    from fi_attn_bench.summarizer.identity import natural_key, natural_sorted

    rng = random.Random(3)
    pool = ["1", "01", "1.0", " 2", "10", "1e1", "1_0", "inf", "nan", "abc", "", "-3", "2.5"]
    pool += ["2.50", "0x1", "3 ", "1e400"]
    for _ in range(2000):
        texts = set(rng.sample(pool, rng.randint(0, len(pool))))
        assert natural_sorted(texts) == sorted(texts, key=natural_key), texts
    numbers = {str(rng.randint(0, 10**6)) for _ in range(1000)} | {"1.0", "1", "01"}
    assert natural_sorted(numbers) == sorted(numbers, key=natural_key)


def test_natural_sorted_reads_integer_texts_as_float_does():
    """Texts of ASCII digits only are parsed at once: leading zeros tie and the text decides,
    integers past 2**53 and past int64 order as float() reads them, other digits and an
    empty text take the general path."""
    import random

    from fi_attn_bench.summarizer.identity import natural_key, natural_sorted

    rng = random.Random(5)
    pool = ["7", "007", "07", "0", "10", "9007199254740992", "9007199254740993"]
    pool += ["9223372036854775807", "9223372036854775808", "9" * 30, "9" * 400, "\u0663"]
    pool += ["\uff13", "", "1" + "0" * 22, "9" * 20]
    for _ in range(2000):
        texts = set(rng.sample(pool, rng.randint(0, len(pool))))
        assert natural_sorted(texts) == sorted(texts, key=natural_key), texts


def test_distinct_values_of_a_categorical_column_are_those_its_rows_use():
    """FrameView.distinct reads a categorical's used categories: an unused one, an empty
    text and a missing cell are not values."""
    import pandas as pd

    from fi_attn_bench.summarizer.frames import FrameView

    column = pd.Categorical(["b", "", None, "a", "b"], categories=["z", "b", "", "a"])
    view = FrameView(pd.DataFrame({"api": ["x"] * 5, "timer": column}))
    assert view.distinct("timer") == ["a", "b"]
    assert view.distinct("l2") is None
