"""Fuzz summarize_results.py: no input may crash it or leave a partial report.

Bounded for CI (a few hundred examples in all).  ``benchmarks/fuzz_summarizer.py``
runs the same properties with SUMMARIZER_FUZZ_EXAMPLES=10000.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from seed_oracle import summarize_results as seed_oracle

import summarize_results as face
from fi_attn_bench.results.reader import read_file
from fi_attn_bench.results.schema import OPTIONAL_COLUMNS
from fi_attn_bench.summarizer import command_line as sr
from fi_attn_bench.summarizer.loading import float_or_nan

EXAMPLES = int(os.environ.get("SUMMARIZER_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 1000,  # CI: reproducible; the long run explores
)
ROOT = Path(__file__).resolve().parents[1]
os.environ["SUMMARIZE_DEBUG"] = "1"  # a bug must surface as an exception, not as exit 2

DECODE = ["batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim"]
RAGGED = ["batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo"]
METRICS = ["time_ms", "bandwidth_GB_s", "tflops"]
GOOD_NUMBERS = st.sampled_from(["1", "0.5", "2.5e-3", "1e6", " 3.25 ", "7", "12345.678"])
BAD_METRICS = st.sampled_from(
    ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1", "", "abc", "0x10", "1,5"]
)
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    max_size=40,
)


@dataclass
class Generated:
    """A CSV file's bytes and whether the generator made it invalid (and how)."""

    data: bytes
    invalid: str | None
    failed_rows: int


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """main() in-process; any exception fails the property (it would be a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = sr.main(argv)
    return code, out.getvalue(), err.getvalue()


def check_report_files(folder: Path, code: int) -> None:
    """No temporary files, and the report is whole: title first, newline last."""
    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if n.endswith(".tmp")], names
    text = (folder / "report.md").read_text(encoding="utf-8")
    assert text.startswith("# FlashInfer Benchmark "), text[:80]
    assert text.endswith("\n")
    if code == sr.EXIT_INPUT_ERROR:  # bad input, or two runs that measured different things
        assert "## Input Errors" in text or "**Verdict: NOT COMPARABLE**" in text


@st.composite
def rows_csv(draw) -> Generated:
    """A plausible benchmark CSV, optionally broken in one named way."""
    layout = draw(st.sampled_from(["v1", "legacy", "v1+optional"]))
    cases = draw(st.sampled_from([DECODE, RAGGED]))
    extra = draw(st.lists(st.sampled_from(OPTIONAL_COLUMNS), max_size=6, unique=True))
    many = draw(st.integers(0, 3)) == 0
    params = cases + ([f"p{i}" for i in range(draw(st.integers(1, 60)))] if many else [])
    if layout == "legacy":
        header = ["api", *params, *METRICS]
    else:
        header = ["schema_version", "api", *params, "status", *METRICS, "error_type", "error"]
        if layout == "v1+optional":
            header += [column.name for column in extra]
    failed_rows = 0
    rows = []
    for index in range(draw(st.integers(1, 6))):
        failed = layout != "legacy" and draw(st.integers(0, 4)) == 0
        failed_rows += failed
        row = {"schema_version": "1", "api": draw(st.sampled_from(["Decode", "MLA", "a|b"]))}
        row.update({name: str(index) for name in params})
        row.update({"status": "failed" if failed else "ok", "error_type": "", "error": ""})
        for name in METRICS:
            row[name] = "" if failed else draw(GOOD_NUMBERS)
        if failed:
            row["error_type"], row["error"] = "RuntimeError", draw(TEXT) or "boom"
        for column in extra:
            row[column.name] = draw(_optional_value(column))
        rows.append(row)
    invalid = draw(st.sampled_from([None, None, "metric", "version", "ragged", "header", "status"]))
    invalid = _break(draw, header, rows, invalid, layout)
    cells = [header] + [[row.get(name, "") for name in header] for row in rows]
    if invalid == "ragged":
        cells[-1] = cells[-1][:-1] if draw(st.booleans()) else [*cells[-1], "x"]
    text = _csv_text(draw, cells)
    data, invalid = _encode(draw, text, invalid)
    return Generated(data, invalid, failed_rows)


def _optional_value(column):
    kind = column.kind.value
    if kind == "count":
        return st.sampled_from(["", "1", "100"])
    if kind in ("positive", "non_negative"):
        return st.sampled_from(["", "0.5", "12"])
    if column.name == "num_shards":  # one shard: a complete sharded run
        return st.sampled_from(["", "1"])
    if kind == "non_negative_int":
        return st.sampled_from(["", "0"])
    if kind == "finite":
        return st.sampled_from(["", "-2.5", "0", "44"])
    if kind == "choice":
        return st.sampled_from(["", *column.choices])
    return st.sampled_from(["", "NVIDIA H200", "a, b", 'say "hi"'])


def _break(draw, header, rows, invalid, layout):
    """Apply one invalidating mutation; return its name (None if the file stays valid)."""
    ok_rows = [row for row in rows if row["status"] == "ok"]
    if invalid == "metric" and ok_rows:
        draw(st.sampled_from(ok_rows))[draw(st.sampled_from(METRICS))] = draw(BAD_METRICS)
        return invalid
    if invalid == "version" and layout != "legacy":
        rows[0]["schema_version"] = draw(st.sampled_from(["2", "", "v1", "1.0"]))
        return invalid
    if invalid == "status" and layout != "legacy":
        rows[0]["status"] = draw(st.sampled_from(["OK", "legacy_inferred_ok", "", "passed"]))
        return invalid
    if invalid == "header":
        index = draw(st.integers(0, len(header) - 1))
        header[index] = draw(st.sampled_from([header[0], f" {header[index]}", ""]))
        if index == 0 and header[0] == header[index]:
            header[index] = ""
        return invalid
    return "ragged" if invalid == "ragged" else None


def _csv_text(draw, cells) -> str:
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    quote_all = draw(st.booleans())
    lines = []
    for row in cells:
        parts = []
        for cell in row:
            needs = quote_all or any(ch in cell for ch in ',"\r\n')
            parts.append('"' + cell.replace('"', '""') + '"' if needs else cell)
        lines.append(",".join(parts))
    return newline.join(lines) + (newline if draw(st.booleans()) else "")


def _encode(draw, text: str, invalid):
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    if encoding == "utf-16":
        return text.encode("utf-16"), "encoding"
    if encoding == "latin-1":
        text = text.replace("Decode", "Décode")
    data = text.encode(encoding, errors="replace")  # latin-1: unmappable -> "?"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data, "encoding"
    return data, invalid


def _write_and_run(
    data: bytes, extra_argv=()
) -> tuple[int, str, Path, tempfile.TemporaryDirectory]:
    folder = tempfile.TemporaryDirectory()
    root = Path(folder.name)
    (root / "in").mkdir()
    (root / "out").mkdir()
    csv_path = root / "in" / "fuzz.csv"
    csv_path.write_bytes(data)
    code, _, err = run_main(
        [str(csv_path), "--output", str(root / "out" / "report.md"), *extra_argv]
    )
    return code, err, root, folder


@FUZZ
@given(rows_csv())
def test_generated_csv_verdicts(case: Generated):
    code, err, root, folder = _write_and_run(case.data)
    with folder:
        check_report_files(root / "out", code)
        if case.invalid:
            assert code == sr.EXIT_INPUT_ERROR, case.invalid
            assert err.startswith("error: ")
        else:
            assert code == (sr.EXIT_BENCHMARK_FAILURE if case.failed_rows else sr.EXIT_OK), err


@st.composite
def mutated_bytes(draw) -> bytes:
    """A valid CSV's bytes with random byte-level edits, or arbitrary bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=300))
    data = bytearray(draw(rows_csv()).data)
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(["insert", "delete", "replace", "long"]))
        if edit == "insert":
            data[position:position] = draw(
                st.sampled_from(
                    [
                        b",",
                        b'"',
                        b"\n",
                        b"\r",
                        b" ",
                        b"\x00",
                        b"\xff",
                        b"\xef\xbb\xbf",
                        b"nan",
                        b"-",
                    ]
                )
            )
        elif edit == "delete":
            del data[position : position + draw(st.integers(1, 4))]
        elif edit == "replace" and position < len(data):
            data[position] = draw(st.integers(0, 255))
        elif edit == "long":
            data[position:position] = b"x" * draw(st.sampled_from([1000, 200_000]))
    return bytes(data)


@FUZZ
@given(mutated_bytes())
def test_arbitrary_bytes_never_crash_and_read_as_the_seed_reads(data: bytes):
    code, err, root, folder = _write_and_run(data)
    with folder:
        assert code in (sr.EXIT_OK, sr.EXIT_BENCHMARK_FAILURE, sr.EXIT_INPUT_ERROR)
        check_report_files(root / "out", code)
        assert (code == sr.EXIT_INPUT_ERROR) == ("error: " in err)
        assert_read_as_the_seed_reads(root / "in" / "fuzz.csv")


def assert_read_as_the_seed_reads(path: Path) -> None:
    """A file the seed can judge (no registered optional column) gets the seed's messages
    and, when valid, as many records with the same ok rows.  The seed's csv field limit
    (128 KiB) is lifted, as the reader never had it: a long error text is data."""
    previous = csv.field_size_limit(1 << 30)
    try:
        text = io.StringIO(path.read_bytes().decode("utf-8-sig", "replace"), newline="")
        header = next(csv.reader(text), [])  # quoted names too, as the seed reads them
        if set(header) & {column.name for column in OPTIONAL_COLUMNS}:
            return
        seed_records, seed_issues = seed_oracle.load_csv(path)
    finally:
        csv.field_size_limit(previous)
    records, issues = face.load_csv(path)
    assert _positionless(issues) == _positionless(seed_issues)
    assert len(records) == len(seed_records)
    ok = [record for record in records if record["status"] != "failed"]
    assert ok == [record for record in seed_records if record["status"] != "failed"]


SEED_V1_HEADER = (
    b"schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    b"status,time_ms,bandwidth_GB_s,tflops,error_type,error\n"
)
SEED_V1_ROW = b"1,Decode,1,1,64,8,8,128,ok,0.5,1.0,2.0,,\n"


@pytest.mark.parametrize(
    "data",
    [
        b'"' + SEED_V1_HEADER + SEED_V1_ROW,
        SEED_V1_HEADER + SEED_V1_ROW + b'1,Decode,2,"1,64,8,8,128,ok,0.5,1.0,2.0,,\n',
        SEED_V1_HEADER + b'1,Decode,2,1,64,8,8,128,failed,,,,E,"boom\n' + SEED_V1_ROW,
        SEED_V1_HEADER + b'1,Decode,2,1,64,8,8,128,failed,,,,E,"boom',
        b"," + SEED_V1_HEADER[1:] + b"x" * 20_000 + b"\xe9\n" + SEED_V1_ROW,
        SEED_V1_HEADER + b"x" * 20_000 + b"\xe9\n" + SEED_V1_ROW,
        (SEED_V1_HEADER + SEED_V1_ROW * 2).replace(b"\n", b"\r"),
        (SEED_V1_HEADER + SEED_V1_ROW).replace(b"\n", b"\r\n") + SEED_V1_ROW[:-1] + b"\r",
    ],
    ids=[
        "a quote opened in the header swallows the file",
        "a quote opened in a middle cell",
        "a quote opened in the last cell, lines after it",
        "a quote opened in the last cell, no line end",
        "a bad header, then a bad byte past the seed's first 8 KB block",
        "a good header, then the same bad byte",
        "CR line ends, the last line's too",
        "CR LF line ends, a lone CR after the last line",
    ],
)
def test_inputs_the_long_fuzz_found_read_as_the_seed_reads(tmp_path, data):
    """Python's csv module ends a quoted cell the file never closes, and its row, at the end
    of the file; the seed decodes the file in 8 KB blocks as it reads, so a bad header is
    judged before a bad byte further on is met; a CR at the end of the file ends a line."""
    path = tmp_path / "found.csv"
    path.write_bytes(data)
    assert_read_as_the_seed_reads(path)


@FUZZ
@given(rows_csv(), rows_csv(), st.sampled_from([None, 0.0, 5.0]))
def test_regression_mode_never_crashes(base: Generated, cand: Generated, gate):
    folder = tempfile.TemporaryDirectory()
    with folder:
        root = Path(folder.name)
        (root / "out").mkdir()
        (root / "b.csv").write_bytes(base.data)
        (root / "c.csv").write_bytes(cand.data)
        argv = ["--baseline", str(root / "b.csv"), "--candidate", str(root / "c.csv")]
        argv += [
            "--output",
            str(root / "out" / "report.md"),
            "--json",
            str(root / "out" / "r.json"),
        ]
        if gate is not None:
            argv += ["--fail-on-regression", str(gate)]
        code, _, _ = run_main(argv)
        assert code in (0, 1, 2)
        if base.invalid or cand.invalid:
            assert code == sr.EXIT_INPUT_ERROR
        names = sorted(p.name for p in (root / "out").iterdir())
        assert names == ["r.json", "report.md"]
        check_report_files(root / "out", code)


def test_subprocess_smoke_on_garbage(tmp_path):
    """The real entry point: exit 2 and a one-line error, no traceback."""
    garbage = tmp_path / "g.csv"
    garbage.write_bytes(b'\xff\xfe\x00garbage,"unterminated\n\x00')
    report = tmp_path / "r.md"
    result = subprocess.run(
        [sys.executable, str(ROOT / "summarize_results.py"), str(garbage), "--output", str(report)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "unable to read CSV" in result.stderr
    assert report.read_text().startswith("# FlashInfer Benchmark Summary")


def test_huge_and_tiny_numbers_are_valid(tmp_path):
    header = "schema_version,api,batch_size,status,time_ms,bandwidth_GB_s,tflops,error_type,error"
    header = header.replace("batch_size", ",".join(DECODE))
    row = "1,Decode," + ",".join("1" for _ in DECODE) + ",ok,1e300,5e-324,1.7976931348623157e308,,"
    path = tmp_path / "h.csv"
    path.write_text(f"{header}\n{row}\n")
    code, _, err = run_main([str(path), "--output", str(tmp_path / "r.md")])
    assert math.isclose(face.load_csv(path)[0][0]["time_ms"], 1e300)  # the seed's reader's rule
    assert code == sr.EXIT_INPUT_ERROR  # but no call takes 1e300 ms: one line says so
    assert err.count("error: ") == 1 and "beyond 1e+07 ms" in err


def _positionless(issues) -> list[str]:
    """Messages without a decoding error's byte position: both readers count it from the
    start of the block they were decoding, and their blocks differ."""
    return [re.sub(r"in position \d+(-\d+)?", "in position N", issue.message) for issue in issues]


@FUZZ
@given(
    st.lists(
        st.one_of(rows_csv().map(lambda case: case.data), mutated_bytes()), min_size=1, max_size=3
    )
)
def test_summaries_of_several_files_never_crash(files: list[bytes]):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        paths = []
        for index, data in enumerate(files):
            paths.append(root / f"f{index}.csv")
            paths[-1].write_bytes(data)
        (root / "out").mkdir()
        code, _, err = run_main([*map(str, paths), "--output", str(root / "out" / "report.md")])
        check_report_files(root / "out", code)
        assert (code == sr.EXIT_INPUT_ERROR) == ("error: " in err)


CELL = st.text(alphabet="0123456789.eE+-_ n", max_size=20)


@FUZZ
@given(st.lists(CELL, min_size=1, max_size=40))
@example(["1E310", "-1e400", "inf", "1"])  # the 10,000-example fuzz found 1E310 read as inf
def test_numbers_are_float_of_the_text(cells: list[str]):
    """Every metric cell the reader holds is what float() makes of it (NaN when float()
    refuses it or it is not finite), whether pandas or the text path parsed it."""
    header = ["schema_version", "api", *DECODE, "status", *METRICS, "error_type", "error"]
    lines = [",".join(header)]
    for index, cell in enumerate(cells):
        lines.append(
            ",".join(["1", "D", *[str(index)] * len(DECODE), "failed", cell, cell, cell, "E", "x"])
        )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "n.csv"
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        read = read_file(path)
        assert read.issues == ()
        expected = [float_or_nan(cell.strip()) for cell in cells]
        got = read.file.frame["time_ms"].tolist()
        assert [v if v == v else "nan" for v in got] == [v if v == v else "nan" for v in expected]


WORDS = st.text(alphabet="ab \t.~", max_size=19)


@FUZZ
@given(st.lists(st.tuples(WORDS, WORDS), min_size=1, max_size=40), st.booleans())
def test_text_columns_hold_each_stripped_cell(cells: list[tuple[str, str]], final_newline: bool):
    """Text columns (the last one ending the file, a case column among them): each row
    holds its stripped cell, and the categories are distinct."""
    header = ["schema_version", "api", *DECODE, "status", *METRICS, "error_type", "error"]
    lines = [",".join([*header, "device"])]
    for index, (error, device) in enumerate(cells):
        row = ["1", "D", error, *[str(index)] * 5, "failed", "", "", "", "E", "e", device]
        lines.append(",".join(row))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="ascii")
        read = read_file(path)
        assert read.issues == ()
        for column, name in ((0, "batch_size"), (1, "device")):
            values = read.file.frame[name]
            categories = values.cat.categories.tolist()
            assert len(set(categories)) == len(categories)
            assert values.tolist() == [cell[column].strip() for cell in cells]
