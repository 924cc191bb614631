"""--bmf: Bencher Metric Format JSON that matches Bencher's documented shape, from real runs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

from fi_attn_bench.summarizer import bmf  # noqa: E402
from fi_attn_bench.summarizer.command_line import main  # noqa: E402

REAL = Path(__file__).parent / "fixtures" / "real_csv"
DECODE = REAL / "h100_decode_default.csv"
HEAD_TO_HEAD = REAL / "h100_ragged_fa2_vs_fa3.csv"
METRIC_KEYS = ("value", "lower_value", "upper_value")


def bmf_shape_problems(document) -> list[str]:
    """Where ``document`` leaves the shape Bencher documents for BMF JSON.

    Written from https://bencher.dev/docs/reference/bencher-metric-format/ (its JSON Schema,
    draft-07, $id https://bencher.dev/bmf.json): an object whose properties (pattern ".+", so
    any non-empty name) are Benchmarks; each Benchmark an object whose properties (".+") are
    Measures; each Measure an object with "value" (number, required) and optional
    "lower_value" and "upper_value" (numbers). The same page limits a Benchmark name to 1024
    characters and a Measure slug to 64. JSON numbers are finite, so NaN and Infinity are out;
    we also emit no other key, and a bound lies on its side of the value.
    """
    if not isinstance(document, dict):
        return ["the document is not an object"]
    problems = []
    for name, measures in document.items():
        if not isinstance(name, str) or not 1 <= len(name) <= 1024:
            problems.append(f"benchmark name of {len(name)} characters")
        if not isinstance(measures, dict) or not measures:
            problems.append(f"{name}: not an object of measures")
            continue
        for slug, metric in measures.items():
            problems += [f"{name}/{slug}: {why}" for why in _metric_problems(slug, metric)]
    return problems


def _metric_problems(slug, metric) -> list[str]:
    if not isinstance(slug, str) or not 1 <= len(slug) <= 64:
        return ["measure slug is not 1-64 characters"]
    if not isinstance(metric, dict) or "value" not in metric:
        return ["no value"]
    problems = [f"unknown key {key}" for key in metric if key not in METRIC_KEYS]
    for key, number in metric.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            problems.append(f"{key} is not a number")
        elif not math.isfinite(number):
            problems.append(f"{key} is not finite")
    if not problems and not metric.get("lower_value", -math.inf) <= metric["value"]:
        problems.append("lower_value above value")
    if not problems and not metric["value"] <= metric.get("upper_value", math.inf):
        problems.append("upper_value below value")
    return problems


def load_bmf(path: Path) -> dict:
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"b": {"latency": {"value": 1.0}}}, []),
        ([], ["the document is not an object"]),
        ({"b": {"latency": {"lower_value": 1.0}}}, ["b/latency: no value"]),
        ({"b": {"latency": {"value": "1"}}}, ["b/latency: value is not a number"]),
        ({"b": {"latency": {"value": math.nan}}}, ["b/latency: value is not finite"]),
        ({"b": {"latency": {"value": 1.0, "p": 2}}}, ["b/latency: unknown key p"]),
        ({"b": {"x" * 65: {"value": 1.0}}}, [f"b/{'x' * 65}: measure slug is not 1-64 characters"]),
        ({"b": {"m": {"value": 1.0, "lower_value": 2.0}}}, ["b/m: lower_value above value"]),
        ({"b": {}}, ["b: not an object of measures"]),
    ],
)
def test_the_shape_check_catches_what_bencher_would_refuse(document, expected):
    assert bmf_shape_problems(document) == expected


def test_a_summary_exports_every_ok_case_in_bencher_shape(tmp_path):
    out = tmp_path / "bench.bmf.json"
    assert main([str(DECODE), "--output", str(tmp_path / "s.md"), "--bmf", str(out)]) == 0
    document = load_bmf(out)
    assert bmf_shape_problems(document) == []
    rows = pd.read_csv(DECODE)
    ok = rows[rows["status"] == "ok"]
    assert len(document) == len(ok) == 27
    first = ok.iloc[0]
    name = next(iter(document))
    assert name.startswith("BatchDecodeWithPagedKVCacheWrapper (batch_size=1, ")
    metric = document[name]
    assert metric["latency-ms"]["value"] == pytest.approx(first["time_ms"])
    half = first["drift_pct"] / 100  # the median's 95 % interval, as the regression gate reads it
    assert metric["latency-ms"]["upper_value"] == pytest.approx(first["time_ms"] * (1 + half))
    assert metric["bandwidth-gb-s"]["value"] == pytest.approx(first["bandwidth_GB_s"])
    assert metric["tflops"]["lower_value"] == pytest.approx(first["tflops"] / (1 + half))


def test_a_head_to_head_exports_each_implementation_and_its_paired_ratio(tmp_path):
    out = tmp_path / "h2h.bmf.json"
    assert main([str(HEAD_TO_HEAD), "--output", str(tmp_path / "s.md"), "--bmf", str(out)]) == 0
    document = load_bmf(out)
    assert bmf_shape_problems(document) == []
    assert len(document) == 40
    fa3 = {name: m for name, m in document.items() if name.endswith("impl=flashinfer:fa3)")}
    assert len(fa3) == 20 and all("paired-ratio" in m for m in fa3.values())
    assert not any("paired-ratio" in m for n, m in document.items() if n not in fa3)
    ratio = next(iter(fa3.values()))["paired-ratio"]
    assert ratio["lower_value"] <= ratio["value"] <= ratio["upper_value"] < 1


def test_a_regression_report_exports_the_candidate(tmp_path):
    rows = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    rows.to_csv(tmp_path / "base.csv", index=False)
    rows.loc[0, "time_ms"] = repr(float(rows.loc[0, "time_ms"]) * 2)
    rows.loc[1, ["status", "time_ms", "error"]] = ["failed", "", "RuntimeError: boom"]
    rows.to_csv(tmp_path / "cand.csv", index=False)
    out = tmp_path / "candidate.bmf.json"
    argv = ["--baseline", str(tmp_path / "base.csv"), "--candidate", str(tmp_path / "cand.csv")]
    assert main([*argv, "--output", str(tmp_path / "r.md"), "--bmf", str(out)]) == 1
    document = load_bmf(out)
    assert bmf_shape_problems(document) == []
    assert len(document) == 26  # the failed case has no time to track
    first = next(iter(document.values()))
    assert first["latency-ms"]["value"] == pytest.approx(float(rows.loc[0, "time_ms"]))  # doubled


def test_hostile_and_huge_case_names_stay_valid_json_and_within_bencher_limits(tmp_path):
    rows = pd.read_csv(DECODE, dtype=str, keep_default_na=False).head(3)
    rows["impl"] = ['"}\n{"x": NaN', "é" * 2000, "é" * 2000 + "!"]
    rows.to_csv(tmp_path / "hostile.csv", index=False)
    out = tmp_path / "hostile.bmf.json"
    main([str(tmp_path / "hostile.csv"), "--output", str(tmp_path / "s.md"), "--bmf", str(out)])
    document = load_bmf(out)
    assert bmf_shape_problems(document) == []
    assert len(document) == 3  # two long names cut, kept apart by their hash


def test_names_past_the_limit_are_cut_and_keep_apart():
    names = bmf.benchmark_names(["api", "api"], ["x" * 2000, "x" * 1999 + "y"])
    assert [len(name) for name in names] == [1023, 1023] and names[0] != names[1]


@pytest.mark.parametrize("which", ["input", "data file"])
def test_the_bmf_file_is_never_an_input_or_a_data_file(tmp_path, capsys, which):
    data = tmp_path / "run.csv"
    shutil.copy(DECODE, data)
    other = tmp_path / "other.csv"
    shutil.copy(DECODE, other)
    target = data if which == "input" else other
    assert main([str(data), "--output", str(tmp_path / "s.md"), "--bmf", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: refusing to write the BMF file (--bmf)") and err.count("\n") == 1
    assert target.read_bytes() == DECODE.read_bytes()
    assert not (tmp_path / "s.md").exists()


def test_the_bmf_file_is_not_the_report_or_stdout(tmp_path):
    for clash in (
        ["--json", str(tmp_path / "a.json"), "--bmf", str(tmp_path / "a.json")],
        ["--bmf", "-"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([str(DECODE), "--output", str(tmp_path / "s.md"), *clash])
        assert exit_info.value.code == 2
