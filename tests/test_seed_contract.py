"""The seed's module API, from the top-level faces, behaves as the seed's did.

The reference is the seed's own code (``tests/seed_oracle``, re-indented from the dump). The
names come from its source, so a seed name missing from ``summarize_results.py`` or
``benchmark_result.py`` fails here; each one is then run side by side with the seed on the
same inputs. Where the product is deliberately richer, the test says why and checks that the
seed's part is unchanged.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import sys
from pathlib import Path

import hypothesis
import hypothesis.strategies as st
import pytest
import torch
from seed_oracle import benchmark_result as seed_br
from seed_oracle import summarize_results as seed_sr

import benchmark_result as product_br
import summarize_results as product_sr
from fi_attn_bench.results.schema import OPTIONAL_COLUMN_NAMES, is_case_column

ORACLE = Path(__file__).parent / "seed_oracle"
REAL_CSVS = sorted((Path(__file__).parent / "fixtures" / "real_csv").glob("*.csv"))

V1_HEADER = (
    "schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    "status,time_ms,bandwidth_GB_s,tflops,error_type,error"
)
LEGACY_HEADER = (
    "api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    "time_ms,bandwidth_GB_s,tflops"
)
LEGACY_ROW = "Decode,1,1,128,32,8,64,1.0,100,1"


def v1_row(batch=1, time_ms="1.0", bw="100", tf="1", status="ok", error="", api="Decode"):
    error_type = "RuntimeError" if error else ""
    if status == "failed":
        time_ms = bw = tf = ""
    return f"1,{api},{batch},1,128,32,8,64,{status},{time_ms},{bw},{tf},{error_type},{error}"


OK_ROW = v1_row()


# ----------------------------------------------------------------- the names


def seed_public_names(path: Path) -> set[str]:
    """Names a seed module defines or imports from the seed at module level, without "_".

    Standard-library imports (``csv``, ``Path``, ...) are the standard library's, not the
    seed's API, and are left out; anything else imported would be an error here.
    """
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.ImportFrom) and node.module == "benchmark_result":
                names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for module in modules or [node.module]:
                    assert module.split(".")[0] in sys.stdlib_module_names, module

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {name for name in names if not name.startswith("_")}


SEED_SR_NAMES = sorted(seed_public_names(ORACLE / "summarize_results.py"))
SEED_BR_NAMES = sorted(seed_public_names(ORACLE / "benchmark_result.py"))


def test_the_name_lists_come_from_the_seed_source():
    # Guards the AST walk itself: an empty or partial list would make the checks below vacuous.
    assert {"main", "parse_args", "load_csv", "COMMON_LEGACY_COLUMNS", "STATUS_OK"} <= set(
        SEED_SR_NAMES
    )
    assert {"execute_benchmark_case", "has_failures", "RESERVED_COLUMNS"} <= set(SEED_BR_NAMES)
    assert len(SEED_SR_NAMES) == 32 and len(SEED_BR_NAMES) == 9


@pytest.mark.parametrize("name", SEED_SR_NAMES)
def test_summarize_results_exports_every_seed_name(name):
    assert hasattr(product_sr, name)
    assert name in product_sr.__all__
    exec(f"from summarize_results import {name}", {})


@pytest.mark.parametrize("name", SEED_BR_NAMES)
def test_benchmark_result_exports_every_seed_name(name):
    assert hasattr(product_br, name)
    exec(f"from benchmark_result import {name}", {})


def _constant_names(module, names):
    return [n for n in names if not callable(getattr(module, n))]


@pytest.mark.parametrize(
    ("seed_module", "product_module", "name"),
    [(seed_sr, product_sr, n) for n in _constant_names(seed_sr, SEED_SR_NAMES)]
    + [(seed_br, product_br, n) for n in _constant_names(seed_br, SEED_BR_NAMES)],
)
def test_constants_equal_the_seeds(seed_module, product_module, name):
    seed_value, product_value = getattr(seed_module, name), getattr(product_module, name)
    assert product_value == seed_value
    assert type(product_value) is type(seed_value)  # a frozenset stays a set, a tuple ordered


# Which test below runs each seed callable against the seed; a new seed callable must be added.
BEHAVIOUR_TESTS = {
    "InputIssue": "test_input_issue_and_load_result_are_built_as_the_seeds",
    "LoadResult": "test_input_issue_and_load_result_are_built_as_the_seeds",
    "parse_float": "test_parse_float",
    "load_csv": "test_load_csv_on_seed_style_legacy_and_malformed_files",
    "load_inputs": "test_load_inputs_joins_files_as_the_seed",
    "describe_case": "test_describe_case_and_case_identity",
    "case_identity": "test_describe_case_and_case_identity",
    "group_by_api": "test_group_by_api_and_best_record",
    "best_record": "test_group_by_api_and_best_record",
    "escape_markdown": "test_escape_markdown",
    "format_metric": "test_format_metric",
    "format_delta": "test_format_delta",
    "build_summary_markdown": "test_report_builders_keep_every_seed_line",
    "build_case_index": "test_build_case_index",
    "build_regression_markdown": "test_report_builders_keep_every_seed_line",
    "parse_args": "test_parse_args_accepts_and_rejects_as_the_seed",
    "main": "test_main_exit_codes_and_reports_on_seed_style_runs",
    "execute_benchmark_case": "test_execute_benchmark_case_records",
    "has_failures": "test_has_failures",
}


def test_every_seed_callable_has_a_behaviour_test():
    callables = {n for n in SEED_SR_NAMES if callable(getattr(seed_sr, n)) and not n.isupper()} | {
        n for n in SEED_BR_NAMES if callable(getattr(seed_br, n))
    }
    assert callables == set(BEHAVIOUR_TESTS)
    assert all(test in globals() for test in BEHAVIOUR_TESTS.values())


# ------------------------------------------------------------ pure helpers


@pytest.mark.parametrize(
    "value",
    ["1", "1e3", " 2 ", "-0.5", "nan", "inf", "-inf", "1e400", "abc", "", "  ", None, 3, 2.5,
     "1_000", "0x10", True, b"7", [1]],
)  # fmt: skip
def test_parse_float(value):
    assert product_sr.parse_float(value) == seed_sr.parse_float(value)


@pytest.mark.parametrize(
    "value",
    ["plain", "a|b*c_d#e[f]`g<h>\\", "one\r\ntwo\nthree\rfour", "<script>&amp;", "ü 中文 <…>",
     "", 1.5, None, "trailing\n"],
)  # fmt: skip
def test_escape_markdown(value):
    assert product_sr.escape_markdown(value) == seed_sr.escape_markdown(value)


@hypothesis.settings(max_examples=500, deadline=None)
@hypothesis.given(st.text(alphabet=st.sampled_from("\\|`*_#[]<>\r\n&a ü中…"), max_size=40))
def test_escape_markdown_any_text(value):
    assert product_sr.escape_markdown(value) == seed_sr.escape_markdown(value)


@pytest.mark.parametrize(
    "value", [0, 1, 0.1 + 0.2, 1234567.0, 1e-9, 12.0, -3.25, math.inf, math.nan, 2818.3344]
)
def test_format_metric(value):
    assert product_sr.format_metric(value) == seed_sr.format_metric(value)


@pytest.mark.parametrize("value", [0.0, -0.0, -2.5, 123.456, 5, 1e-9, math.inf, -math.inf])
def test_format_delta(value):
    assert product_sr.format_delta(value) == seed_sr.format_delta(value)


SEED_STYLE_RECORDS = [
    {"api": "A", "batch_size": "2", "head_dim": "", "status": "ok", "time_ms": 1.0},
    {"api": "A", "zeta": "1", "alpha": " x ", "seq_len": "5", "batch_size": 2, "_x": 1,
     "_source": "s.csv", "_line": 3, "status": "failed", "time_ms": "", "error": "boom"},
    {"api": "B", "status": "ok"},
    {"api": "C", "num_heads": "0", "head_dim_kpe": 0, "impl": "fa2", "schema_version": "1",
     "error_type": "", "status": "ok"},
    {"api": "E", "head_dim_qk": 1.5, "head_dim_vo": "128", "seq_len_kv": "4096",
     "num_kv_heads": "8", "seq_len_q": "1", "num_qo_heads": "32", "head_dim_ckv": "512"},
    {"api": "F", "note": "a|b", "batch_size": "1"},
]  # fmt: skip


@pytest.mark.parametrize("record", SEED_STYLE_RECORDS)
def test_describe_case_and_case_identity(record):
    assert product_sr.describe_case(record) == seed_sr.describe_case(record)
    assert product_sr.case_identity(record) == seed_sr.case_identity(record)


def test_describe_case_leaves_out_the_harness_measurement_columns():
    # Deliberately richer: the seed took every unknown column for a case parameter; the
    # product's registry knows its measurement columns (samples, noise_pct, ...), so a full
    # harness row is described (and matched) by its case alone. On the rest it is the seed's.
    record = {"api": "A", "batch_size": "4", "samples": "100", "noise_pct": "2.5", "impl": "x"}
    without = {k: v for k, v in record.items() if k not in OPTIONAL_COLUMN_NAMES}
    assert product_sr.describe_case(record) == seed_sr.describe_case(without)
    assert product_sr.case_identity(record) == seed_sr.case_identity(without)
    assert "samples=100" in seed_sr.describe_case(record)


def _records():
    return [
        {"api": "B", "status": "ok", "time_ms": 2.0, "bandwidth_GB_s": 5.0, "tflops": 1.0,
         "_source": "x"},
        {"api": "A", "status": "legacy_inferred_ok", "time_ms": 1.0, "bandwidth_GB_s": 9.0,
         "tflops": 1.0, "_source": "y"},
        {"api": "A", "status": "ok", "time_ms": 1.0, "bandwidth_GB_s": 9.0, "tflops": 3.0,
         "_source": "z"},
        {"api": "A", "status": "failed", "time_ms": "", "bandwidth_GB_s": "", "tflops": "",
         "_source": "w"},
    ]  # fmt: skip


def test_group_by_api_and_best_record():
    records = _records()
    product_groups, seed_groups = product_sr.group_by_api(records), seed_sr.group_by_api(records)
    assert list(product_groups) == list(seed_groups)
    for api, group in seed_groups.items():
        assert all(r is s for r, s in zip(product_groups[api], group, strict=True))
        for column in ("time_ms", "bandwidth_GB_s", "tflops"):
            # ties go to the first record in both: the same object, not just an equal one
            assert product_sr.best_record(group, column) is seed_sr.best_record(group, column)
    assert product_sr.best_record(records[3:], "time_ms") is None
    assert seed_sr.best_record(records[3:], "time_ms") is None


def test_build_case_index():
    base = {"api": "A", "batch_size": "1", "status": "ok", "_line": 2}
    records = [
        {**base, "_source": "x"},
        {**base, "_source": "y", "_line": 5},
        {**base, "batch_size": "2", "_source": "x"},
        {**base, "_source": "z", "_line": 9},
        {**base, "api": "B", "_source": "x"},
    ]
    product_index, product_issues = product_sr.build_case_index(records, "candidate")
    seed_index, seed_issues = seed_sr.build_case_index(records, "candidate")
    assert list(product_index) == list(seed_index)
    assert all(product_index[key] is seed_index[key] for key in seed_index)
    assert _issue_tuples(product_issues) == _issue_tuples(seed_issues)
    assert len(seed_issues) == 2  # two later copies of one case: both named, the case dropped


def _issue_tuples(issues):
    return [(issue.source, issue.message, issue.group) for issue in issues]


def test_input_issue_and_load_result_are_built_as_the_seeds():
    for module in (seed_sr, product_sr):
        issue = module.InputIssue("a.csv", "bad")
        assert (issue.source, issue.message, issue.group) == ("a.csv", "bad", "input")
        assert module.InputIssue("a.csv", "bad", "baseline") == module.InputIssue(
            source="a.csv", message="bad", group="baseline"
        )
    results = []
    for module in (seed_sr, product_sr):
        result = module.LoadResult(group="candidate", paths=("p", "q"))
        result.records.extend([{"_source": "p"}, {"_source": "p"}])  # as the seed's reader did
        result.issues.append(module.InputIssue("q", "bad", "candidate"))
        results.append(
            (result.group, list(result.paths), result.records, _issue_tuples(result.issues))
        )
        results[-1] += (result.valid_sources,)
        positional = module.LoadResult("input", ["x"], [{"_source": "x"}], [])
        results[-1] += (positional.records, positional.valid_sources)
    assert results[1] == results[0]


# ------------------------------------------------------------- the records


class _Boom(Exception):
    pass


def _raise(exc):
    def benchmark():
        raise exc

    return benchmark


BENCHMARKS = {
    "ok": lambda: (2.0, 4e6, 8e9),
    "ints": lambda: (2, 4, 8),
    "numeric strings": lambda: ("1.5", "3", "4"),
    "exception": _raise(RuntimeError("CUDA out of memory")),
    "custom exception": _raise(_Boom()),
    "kernel name KeyError": _raise(KeyError("BatchPrefillWithPagedKVCacheKernel")),
    "nan time": lambda: (math.nan, 1, 1),
    "inf time": lambda: (math.inf, 1, 1),
    "zero time": lambda: (0.0, 1, 1),
    "negative time": lambda: (-1.0, 1, 1),
    "negative io": lambda: (1.0, -1, 1),
    "negative flops": lambda: (1.0, 1, -5),
    "nan io": lambda: (1.0, math.nan, 1),
    "text time": lambda: ("x", 1, 1),
    "overflowing bandwidth": lambda: (1e-300, 1e308, 0),
    "two values": lambda: (1.0, 2),
    "five values": lambda: (1.0, 2, 3, {}, 5),
    "None": lambda: None,
}


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_execute_benchmark_case_records(name):
    case = {"batch_size": 1, "seq_len": 128, "impl": "fa2"}
    product = product_br.execute_benchmark_case("Decode", case, BENCHMARKS[name])
    assert product == seed_br.execute_benchmark_case("Decode", case, BENCHMARKS[name])
    assert list(product) == list(seed_br.execute_benchmark_case("Decode", case, BENCHMARKS[name]))


@pytest.mark.parametrize(
    "case", [{"status": 1}, {"_source": 1}, {"api": 2}, {"error": 1, "time_ms": 2}]
)
def test_execute_benchmark_case_rejects_result_columns_before_running(case):
    calls = []

    def benchmark():
        calls.append(1)
        return 1.0, 1, 1

    messages = []
    for module in (seed_br, product_br):
        with pytest.raises(ValueError) as raised:
            module.execute_benchmark_case("Decode", case, benchmark)
        messages.append(str(raised.value))
    assert messages[1] == messages[0]
    assert calls == []  # a misnamed case must not cost a GPU run, as in the seed


def test_execute_benchmark_case_lets_keyboard_interrupt_through():
    for module in (seed_br, product_br):
        with pytest.raises(KeyboardInterrupt):
            module.execute_benchmark_case("Decode", {}, _raise(KeyboardInterrupt()))


def test_execute_benchmark_case_reserves_the_harness_columns_too():
    # Deliberately stricter: every CSV column has one writer, so a case field may not take a
    # measurement column's name either (the seed reserved only its own result columns).
    with pytest.raises(ValueError, match="reserved result columns: samples"):
        product_br.execute_benchmark_case("Decode", {"samples": 3}, lambda: (1.0, 1, 1))
    assert seed_br.execute_benchmark_case("Decode", {"samples": 3}, lambda: (1.0, 1, 1))


@pytest.mark.parametrize(
    "records",
    [[], [{"status": "ok"}], [{"status": "failed"}], [{}], [{"status": "FAILED"}],
     [{"status": "ok"}, {"status": "failed"}], [{"status": "legacy_inferred_ok"}]],
)  # fmt: skip
def test_has_failures(records):
    assert product_br.has_failures(records) == seed_br.has_failures(records)
    assert product_br.has_failures(iter(records)) == seed_br.has_failures(iter(records))


# ------------------------------------------------------------------ reading

CSV_FILES = {
    "seed v1": [V1_HEADER, OK_ROW, v1_row(2, "2.0"), v1_row(3, status="failed", error="boom")],
    "no bytes": [],
    "header only": [V1_HEADER],
    "utf-8 BOM": "\ufeff" + V1_HEADER + "\n" + OK_ROW + "\n",
    "CRLF": "\r\n".join([V1_HEADER, OK_ROW]) + "\r\n",
    "blank lines": "\n\n" + V1_HEADER + "\n\n" + OK_ROW + "\n\n",
    "empty header name": [V1_HEADER + ",", OK_ROW + ","],
    "duplicate header": [V1_HEADER + ",api", OK_ROW + ",x"],
    "padded header": [V1_HEADER.replace("api", " api"), OK_ROW],
    "v1 missing a column": [V1_HEADER.replace(",error_type", ""), OK_ROW[:-1]],
    "unknown v1 layout": [
        "schema_version,api,foo,status,time_ms,bandwidth_GB_s,tflops,error_type,error",
        "1,A,1,ok,1,1,1,,",
    ],
    "unknown legacy layout": ["api,foo,time_ms,bandwidth_GB_s,tflops", "A,1,1,1,1"],
    "status without the other v1 columns": [LEGACY_HEADER + ",status", LEGACY_ROW + ",ok"],
    "legacy": [LEGACY_HEADER, LEGACY_ROW, LEGACY_ROW.replace("Decode,1,", "Decode,2,")],
    "legacy zero time": [LEGACY_HEADER, LEGACY_ROW.replace("1.0", "0")],
    "legacy nan time": [LEGACY_HEADER, LEGACY_ROW.replace("1.0", "nan")],
    "legacy MLA": [
        "api,batch_size,seq_len,num_heads,head_dim_ckv,head_dim_kpe,time_ms,bandwidth_GB_s,tflops",
        "MLA,1,1024,16,512,64,0.5,10,2",
    ],
    "row too long": [V1_HEADER, OK_ROW + ",extra"],
    "row too short": [V1_HEADER, OK_ROW.rsplit(",", 1)[0]],
    "empty api": [V1_HEADER, OK_ROW.replace("Decode", "")],
    "schema 2": [V1_HEADER, "2" + OK_ROW[1:]],
    "unknown status": [V1_HEADER, OK_ROW.replace(",ok,", ",weird,")],
    "ok with an error": [V1_HEADER, OK_ROW[:-2] + ",E,msg"],
    "failed without an error": [V1_HEADER, OK_ROW.replace(",ok,1.0,100,1", ",failed,,,")],
    "zero time": [V1_HEADER, v1_row(time_ms="0")],
    "negative bandwidth": [V1_HEADER, v1_row(bw="-1")],
    "infinite bandwidth": [V1_HEADER, v1_row(bw="inf")],
    "text time": [V1_HEADER, v1_row(time_ms="abc")],
    "hex time": [V1_HEADER, v1_row(time_ms="0x10")],
    "underscore digits": [V1_HEADER, v1_row(bw="1_0")],
    "huge number": [V1_HEADER, v1_row(bw="1e308")],
    "two bad rows and a good one": [V1_HEADER, v1_row(time_ms="0"), v1_row(bw="-1"), OK_ROW],
    "padded cells": [V1_HEADER, OK_ROW.replace("Decode", " Decode ").replace(",ok,", ", ok ,")],
    "quoted newline in an error": [V1_HEADER, v1_row(status="failed", error='"line1\nline2"')],
    "markdown in cells": [V1_HEADER, v1_row(api="A|B<c>", status="failed", error="x_y*z")],
    "extra case column": [V1_HEADER + ",impl", OK_ROW + ",fa2"],
    "duplicate cases": [V1_HEADER, OK_ROW, OK_ROW],
    "not UTF-8": None,
    "missing file": "MISSING",
    "a directory": "DIRECTORY",
}


def write_csv(folder: Path, name: str) -> Path:
    content = CSV_FILES[name]
    path = folder / (name.replace(" ", "_") + ".csv")
    if content is None:
        path.write_bytes(
            (V1_HEADER + "\n" + OK_ROW.replace("Decode", "D\xe9code") + "\n").encode("latin-1")
        )
    elif content == "DIRECTORY":
        path.mkdir()
    elif isinstance(content, str) and content != "MISSING":
        path.write_text(content, encoding="utf-8", newline="")
    elif isinstance(content, list):
        path.write_text("\n".join(content) + ("\n" if content else ""), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", list(CSV_FILES))
def test_load_csv_on_seed_style_legacy_and_malformed_files(tmp_path, name):
    path = write_csv(tmp_path, name)
    for group in ("input", "baseline"):
        product_records, product_issues = product_sr.load_csv(path, group)
        seed_records, seed_issues = seed_sr.load_csv(path, group)
        assert product_records == seed_records
        assert [list(r) for r in product_records] == [list(r) for r in seed_records]
        assert _issue_tuples(product_issues) == _issue_tuples(seed_issues)


def test_load_csv_failed_rows_carry_parsed_metrics(tmp_path):
    # Deliberately different: the columnar reader holds metrics as numbers, so a failed row's
    # metric cells come back parsed (a number as float, text as ""), where the seed kept the
    # text. Validity, issues and every other cell are the seed's.
    path = tmp_path / "failed.csv"
    path.write_text(
        V1_HEADER + "\n" + OK_ROW.replace(",ok,1.0,100,1,,", ",failed,abc,-1,,E,x") + "\n"
    )
    (product,), product_issues = product_sr.load_csv(path)
    (seed,), seed_issues = seed_sr.load_csv(path)
    assert product_issues == seed_issues == []
    assert (seed["time_ms"], seed["bandwidth_GB_s"]) == ("abc", "-1")
    assert (product["time_ms"], product["bandwidth_GB_s"]) == ("", -1.0)
    metrics = ("time_ms", "bandwidth_GB_s", "tflops")
    assert {k: v for k, v in product.items() if k not in metrics} == {
        k: v for k, v in seed.items() if k not in metrics
    }


def test_load_inputs_joins_files_as_the_seed(tmp_path):
    names = ["seed v1", "legacy", "zero time", "missing file", "header only"]
    paths = [write_csv(tmp_path, name) for name in names]
    product, seed = (
        product_sr.load_inputs(paths, "candidate"),
        seed_sr.load_inputs(paths, "candidate"),
    )
    assert (product.group, product.paths) == (seed.group, seed.paths)
    assert product.records == seed.records
    assert _issue_tuples(product.issues) == _issue_tuples(seed.issues)
    assert product.valid_sources == seed.valid_sources
    default = product_sr.load_inputs(paths[:1])
    assert default.group == seed_sr.load_inputs(paths[:1]).group == "input"


def _same_cell(product, seed) -> bool:
    """A cell of a harness CSV: the seed's text, or that text read as a number (the product
    parses its registered numeric columns)."""
    if product == seed:
        return True
    return isinstance(product, float) and seed != "" and float(seed) == product


@pytest.mark.parametrize("path", REAL_CSVS, ids=lambda p: p.name)
def test_load_csv_on_real_harness_output(path):
    product_records, product_issues = product_sr.load_csv(path)
    seed_records, seed_issues = seed_sr.load_csv(path)
    assert product_issues == seed_issues == []
    assert len(product_records) == len(seed_records) > 0
    for product, seed in zip(product_records, seed_records, strict=True):
        assert list(product) == list(seed)
        assert all(_same_cell(product[k], seed[k]) for k in seed), seed["_line"]


def test_real_csv_fixtures_are_present():
    assert [p.name for p in REAL_CSVS] == [
        "h100_decode_default.csv",
        "h100_paged_serving.csv",
        "h100_ragged_fa2_vs_fa3.csv",
    ]


# ------------------------------------------------------------ the command

PARSE_ARGVS = [
    [],
    ["a.csv"],
    ["a.csv", "b.csv", "--output", "out/r.md"],
    ["--baseline", "b.csv", "--candidate", "c.csv"],
    ["--baseline", "b1.csv", "b2.csv", "--candidate", "c.csv", "--fail-on-regression", "5.5"],
    ["--baseline", "b.csv", "--candidate", "c.csv", "--fail-on-regression", "0"],
    ["a.csv", "--baseline", "b.csv", "--candidate", "c.csv"],
    ["--baseline", "b.csv"],
    ["--candidate", "c.csv"],
    ["--baseline", "--candidate", "c.csv"],
    ["a.csv", "--fail-on-regression", "5"],
    ["--fail-on-regression", "5"],
    ["--baseline", "b.csv", "--candidate", "c.csv", "--fail-on-regression", "nan"],
    ["--baseline", "b.csv", "--candidate", "c.csv", "--fail-on-regression", "inf"],
    ["--baseline", "b.csv", "--candidate", "c.csv", "--fail-on-regression", "-1"],
    ["--baseline", "b.csv", "--candidate", "c.csv", "--fail-on-regression", "abc"],
    ["a.csv", "--bogus"],
    ["a.csv", "--output"],
]


def _parse(module, argv):
    """("ok", the seed's attributes) or ("exit", code, last stderr line)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = module.parse_args(argv)
    except SystemExit as exc:
        return ("exit", exc.code, err.getvalue().strip().splitlines()[-1])
    names = ("csv", "baseline", "candidate", "fail_on_regression", "output")
    return ("ok", {name: getattr(args, name) for name in names})


@pytest.mark.parametrize("argv", PARSE_ARGVS, ids=" ".join)
def test_parse_args_accepts_and_rejects_as_the_seed(argv):
    assert _parse(product_sr, argv) == _parse(seed_sr, argv)


def _seed_style_runs(folder: Path, write: bool = True) -> dict[str, list[str]]:
    def csv(name, *rows):
        path = folder / name
        if write:
            path.write_text("\n".join([V1_HEADER, *rows]) + "\n", encoding="utf-8")
        return str(path)

    a = csv("a.csv", OK_ROW, v1_row(2))
    same = csv("same.csv", OK_ROW, v1_row(2))
    slow = csv("slow.csv", v1_row(1, "1.2", "83", "0.83"), v1_row(2))
    fast = csv("fast.csv", v1_row(1, "0.8", "125", "1.25"), v1_row(2))
    cand_failed = csv("cand_failed.csv", v1_row(1, status="failed", error="boom"), v1_row(2))
    base_failed = csv("base_failed.csv", v1_row(1, status="failed", error="old"), v1_row(2))
    fewer = csv("fewer.csv", OK_ROW)
    more = csv("more.csv", OK_ROW, v1_row(2), v1_row(3))
    more_failed = csv("more_failed.csv", OK_ROW, v1_row(2), v1_row(3, status="failed", error="x"))
    zero = csv("zero.csv", v1_row(1, bw="0", tf="0"), v1_row(2))
    invalid = csv("invalid.csv", v1_row(1, time_ms="0"))
    dup = csv("dup.csv", OK_ROW, OK_ROW, v1_row(2))
    legacy = folder / "legacy.csv"
    if write:
        legacy.write_text(LEGACY_HEADER + "\n" + LEGACY_ROW.replace("Decode", "Legacy") + "\n")
    gate = ["--fail-on-regression"]
    return {
        "summary ok": [a],
        "summary with legacy": [a, str(legacy)],
        "summary failed case": [cand_failed],
        "summary invalid file": [invalid],
        "summary invalid and valid": [a, invalid],
        "summary missing file": [a, str(folder / "missing.csv")],
        "same": ["--baseline", a, "--candidate", same],
        "slower, no gate": ["--baseline", a, "--candidate", slow],
        "slower, gate 10": ["--baseline", a, "--candidate", slow, *gate, "10"],
        "slower, gate 30": ["--baseline", a, "--candidate", slow, *gate, "30"],
        "slower, gate 0": ["--baseline", a, "--candidate", slow, *gate, "0"],
        "faster, gate 0": ["--baseline", a, "--candidate", fast, *gate, "0"],
        "candidate failed": ["--baseline", a, "--candidate", cand_failed],
        "recovered": ["--baseline", base_failed, "--candidate", same],
        "both failed": ["--baseline", base_failed, "--candidate", cand_failed],
        "missing candidate case": ["--baseline", a, "--candidate", fewer],
        "new candidate case": ["--baseline", a, "--candidate", more],
        "new failed candidate case": ["--baseline", a, "--candidate", more_failed],
        "duplicate candidate case": ["--baseline", a, "--candidate", dup],
        "invalid candidate": ["--baseline", a, "--candidate", invalid],
        "zero baseline throughput": ["--baseline", zero, "--candidate", same],
        "zero baseline, gate 5": ["--baseline", zero, "--candidate", same, *gate, "5"],
        "one side of two files": ["--baseline", a, base_failed, "--candidate", same],
        "legacy baseline": ["--baseline", str(legacy), "--candidate", str(legacy)],
    }


RUN_NAMES = list(_seed_style_runs(Path("unused"), write=False))


def _main(module, argv, output: Path):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main([*argv, "--output", str(output)])
    return code, out.getvalue(), output.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", RUN_NAMES)
def test_main_exit_codes_and_reports_on_seed_style_runs(tmp_path, name):
    argv = _seed_style_runs(tmp_path)[name]
    seed_code, seed_out, seed_report = _main(seed_sr, argv, tmp_path / "seed.md")
    code, out, report = _main(product_sr, argv, tmp_path / "product.md")
    assert code == seed_code
    assert f"Summary saved to {tmp_path / 'product.md'}" in out
    # Richer report (verdict, case table, notes), same title, and every line the seed wrote.
    assert report.splitlines()[0] == seed_report.splitlines()[0]
    assert [line for line in seed_report.splitlines() if line not in report.splitlines()] == []


def test_a_case_twice_in_one_summary_run_is_an_input_error(tmp_path):
    # Deliberately stricter (docs/DESIGN.md, "One duplicates rule"): the seed refused duplicate
    # cases only in regression mode and summarized the same file given twice as all ok.
    path = write_csv(tmp_path, "duplicate cases")
    assert _main(seed_sr, [str(path)], tmp_path / "s.md")[0] == seed_sr.EXIT_OK
    code, _, report = _main(product_sr, [str(path)], tmp_path / "p.md")
    assert code == product_sr.EXIT_INPUT_ERROR
    assert "duplicate case also found at" in report


def test_report_builders_keep_every_seed_line(tmp_path):
    runs = _seed_style_runs(tmp_path)
    for name in ("summary with legacy", "summary failed case", "summary invalid and valid"):
        seed = seed_sr.build_summary_markdown(seed_sr.load_inputs([Path(p) for p in runs[name]]))
        product = product_sr.build_summary_markdown(
            product_sr.load_inputs([Path(p) for p in runs[name]])
        )
        assert product.startswith("# FlashInfer Benchmark Summary\n")
        assert set(seed.splitlines()) <= set(product.splitlines()), name
    for name in ("slower, gate 10", "candidate failed", "duplicate candidate case", "recovered"):
        argv = runs[name]
        base = [Path(argv[1])]
        cand = [Path(argv[3])]
        threshold = float(argv[5]) if len(argv) > 4 else None
        results = []
        for module in (seed_sr, product_sr):
            markdown, failed, issues = module.build_regression_markdown(
                module.load_inputs(base, "baseline"),
                module.load_inputs(cand, "candidate"),
                threshold,
            )
            results.append((markdown, failed, _issue_tuples(issues)))
        (seed_md, *seed_rest), (product_md, *product_rest) = results
        assert product_rest == seed_rest, name
        assert product_md.startswith("# FlashInfer Benchmark Regression\n")
        assert set(seed_md.splitlines()) <= set(product_md.splitlines()), name


def _seed_projection(path: Path, folder: Path) -> Path:
    """The real CSV cut to the columns a seed-era file has (the result columns and the case)."""
    import csv

    with path.open(encoding="utf-8", newline="") as source:
        rows = list(csv.DictReader(source))
    columns = [n for n in rows[0] if n in seed_sr.V1_REQUIRED_COLUMNS or is_case_column(n)]
    target = folder / path.name
    with target.open("w", encoding="utf-8", newline="") as sink:
        writer = csv.DictWriter(sink, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return target


@pytest.mark.parametrize("path", REAL_CSVS, ids=lambda p: p.name)
def test_main_on_real_harness_output(tmp_path, path):
    for argv in ([str(path)], ["--baseline", str(path), "--candidate", str(path)]):
        seed_code, _, seed_report = _main(seed_sr, argv, tmp_path / "seed.md")
        code, _, report = _main(product_sr, argv, tmp_path / "product.md")
        assert code == seed_code == 0
        # The seed took the measurement columns for case parameters, so its case texts differ;
        # every line without a case text (title, counts, per-API rows and statuses) is the same.
        seed_lines = [line for line in seed_report.splitlines() if "samples=" not in line]
        assert set(seed_lines) <= set(report.splitlines())
    # Cut to a seed-era file's columns, the whole seed report is there, case texts included.
    projected = str(_seed_projection(path, tmp_path))
    for argv in ([projected], ["--baseline", projected, "--candidate", projected]):
        seed_code, _, seed_report = _main(seed_sr, argv, tmp_path / "seed.md")
        code, _, report = _main(product_sr, argv, tmp_path / "product.md")
        assert code == seed_code == 0
        assert set(seed_report.splitlines()) <= set(report.splitlines())


def test_the_oracle_runs_as_a_program_with_the_same_exit_codes(tmp_path):
    import subprocess

    runs = _seed_style_runs(tmp_path)
    root = Path(__file__).resolve().parents[1]
    for name in ("summary ok", "summary failed case", "summary invalid file"):
        codes = [
            subprocess.run(
                [sys.executable, str(script), *runs[name], "--output", str(tmp_path / "r.md")],
                capture_output=True,
                cwd=tmp_path,
                check=False,
            ).returncode
            for script in (ORACLE / "summarize_results.py", root / "summarize_results.py")
        ]
        assert codes[0] == codes[1] == {"summary ok": 0, "summary failed case": 1}.get(name, 2)


def test_settings_still_answers_to_its_old_name_backend():
    from bench_common import Settings

    settings = Settings(torch.device("cpu"), torch.float16, 16, "torch", seed=1)
    assert settings.backend == settings.impl_kind == "torch"
