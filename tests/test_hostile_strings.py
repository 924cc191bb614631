"""One corpus of hostile strings, put where a CSV or the store carries text (the impl
column, the device, a commit, the branch), run through every output of fi-attn-history and
the summarizer: Markdown, the HTML dashboard (in headless Chromium), the terminal, JSON
and the baseline CSVs."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fi_attn_bench.history.command_line import main as history
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.summarizer.command_line import main as summarize
from tests.test_history import DECODE, noisy_factors

PAYLOADS = (
    "[click](https://evil.example/x)",
    "![pixel](https://evil.example/p.png)",
    "<img src=x onerror=alert(1)>",
    "<!--<script>",
    "</script><script>alert(1)</script>",
    "row\n| fake | row | injected |",
    "cr\rline",
    "`` ` ``break`out",
    "pipe|in|cell",
    "quote\"and'apostrophe",
    "\x1b[31mred\x1b[0m\x1b]0;retitled\x07",
    "bell\x07back\x08space",
    "line\u2028sep\u2029para",
    "\u202eright-to-left",
    '=HYPERLINK("https://evil.example","x")',
    "@SUM(1+1)",
    "+1+1",
    "-1+1",
    "\ttab",
    "&amp;&lt;",
)
STORED = {payload.strip() for payload in PAYLOADS}  # a case field is stored stripped
HOSTILE_DEVICE = "<!--<script>GPU</script>"
HOSTILE_BRANCH = "main<!--<script>"
HOSTILE_COMMIT = "`x` | <img src=y>"  # git refuses it, a hand-edited CSV does not
RUNS, STEP_RUN, STEPPED_CASE = 14, 9, 4
TERMINAL_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


def hostile_frame(run: int, factor: np.ndarray) -> pd.DataFrame:
    frame = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    frame["impl"] = [PAYLOADS[i % len(PAYLOADS)] for i in range(len(frame))]
    frame["device"] = HOSTILE_DEVICE
    frame["time_ms"] = [
        repr(float(t) * float(f)) for t, f in zip(frame["time_ms"], factor, strict=True)
    ]
    frame["timestamp_utc"] = f"2026-02-{run + 1:02d}T00:00:00Z"
    frame["git_commit"] = HOSTILE_COMMIT if run == STEP_RUN else f"{run:040x}"
    frame["filter"] = PAYLOADS[run % len(PAYLOADS)]
    return frame


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """RUNS hostile runs (one case 8 % slower from STEP_RUN on) in a store; the outputs."""
    folder = tmp_path_factory.mktemp("hostile")
    factors = noisy_factors(RUNS, 27, seed=21)
    factors[STEP_RUN:, STEPPED_CASE] *= 1.08
    paths = []
    for run in range(RUNS):
        paths.append(folder / f"run_{run:02d}.csv")
        frame = hostile_frame(run, factors[run])
        with open(paths[-1], "w", newline="", encoding="utf-8") as stream:  # quotes a bare CR
            writer = csv.writer(stream)
            writer.writerow(frame.columns)
            writer.writerows(frame.itertuples(index=False))
    store = folder / "h.sqlite"
    assert (
        history(["add", *map(str, paths), "--store", str(store), "--branch", HOSTILE_BRANCH]) == 0
    )
    return folder, store, paths


def markdown_problems(text: str) -> list[str]:
    """What would make a Markdown report run or show something a CSV put there."""
    problems = []
    for raw in ("<img", "<script", "<!--", "</script", "\x1b", "\u202e"):
        if raw in text.lower():
            problems.append(f"raw {raw!r}")
    if re.search(r"(?<!\\)\]\(", text):
        problems.append("a link or image")
    unescaped_ticks = re.sub(r"`[\w.= -]+`", "", text)  # the reports' own code spans
    if re.search(r"(?<!\\)`", unescaped_ticks):
        problems.append("a backtick")
    table: list[int] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append(len(re.findall(r"(?<!\\)\|", line)))
        elif table:
            if len(set(table)) != 1:
                problems.append(f"rows with other cell counts {table}")
            table = []
    if "\n| fake" in text:
        problems.append("a fake row")
    return problems


def test_the_history_digest_is_inert_markdown(hostile, tmp_path):
    _, store, _ = hostile
    digest = tmp_path / "d.md"
    assert history(["report", "--store", str(store), "--md", str(digest)]) == 0
    text = digest.read_text()
    assert "| +8." in text or "| +7." in text  # the stepped case's row is there, escaped
    assert markdown_problems(text) == []


def test_detect_on_the_terminal_shows_control_codes_as_escapes(hostile, capsys):
    _, store, _ = hostile
    assert history(["detect", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "change point(s)" in out and "\\x1b" not in out.split("\n")[0]
    assert TERMINAL_CONTROLS.findall(out) == []
    assert "\n| fake" not in out


def test_detect_json_keeps_every_string_exactly(hostile, capsys):
    _, store, _ = hostile
    assert history(["detect", "--store", str(store), "--json"]) == 0
    out = capsys.readouterr().out
    assert TERMINAL_CONTROLS.findall(out) == []
    records = [json.loads(line) for line in out.splitlines()]
    assert any(record["commit"] == HOSTILE_COMMIT for record in records)
    assert all(record["branch"] == HOSTILE_BRANCH for record in records)


def test_the_baseline_csvs_keep_the_strings_as_data(hostile, tmp_path):
    """Decision (docs/HISTORY.md): schema-v1 CSVs are data our reader reads back byte for byte,
    so cells are written as they are, formulas included; they are not for spreadsheets."""
    _, store, _ = hostile
    argv = ["baseline", "--store", str(store), "--branch", HOSTILE_BRANCH]
    assert history([*argv, "--out", str(tmp_path / "b")]) == 0
    (path,) = (tmp_path / "b").glob("*.csv")
    impls = {row["impl"] for row in read_stored_rows(path).rows}
    assert impls == STORED  # "=HYPERLINK(...)" and "@SUM(...)" included, as the CSV had them


@pytest.fixture(scope="module")
def dashboard(hostile):
    folder, store, _ = hostile
    page = folder / "dash.html"
    assert history(["report", "--store", str(store), "--html", str(page)]) == 0
    return page


def test_no_stored_string_can_end_the_data_element(dashboard):
    text = dashboard.read_text()
    data = text.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    assert not set("<>&\u2028\u2029") & set(data)
    payload = json.loads(data)
    assert {series["impl"] for series in payload["series"]} == STORED
    assert text.count("</script>") == 2  # the data's and the code's own


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found (.ci/run installs it)")
def test_the_hostile_dashboard_draws_every_chart_in_chromium(dashboard):
    from tests.test_history_browser import chart_boxes, rendered_dom

    dom = rendered_dom(dashboard)
    assert len(chart_boxes(dom)) == 27
    assert dom.count("<polyline") == 27
    assert "27 of 27 charts" in dom
    assert "<img" not in dom and "&lt;img src=x onerror" in dom  # every payload stayed text


def summarizer_inputs(hostile) -> tuple[Path, Path]:
    _, _, paths = hostile
    return paths[0], paths[-1]


def test_the_summary_report_terminal_and_json_are_inert(hostile, tmp_path, capsys):
    first, _ = summarizer_inputs(hostile)
    report, data = tmp_path / "s.md", tmp_path / "s.json"
    summarize([str(first), "--output", str(report), "--json", str(data)])
    captured = capsys.readouterr()
    assert TERMINAL_CONTROLS.findall(captured.out + captured.err) == []
    assert markdown_problems(report.read_text()) == []
    assert {row["impl"] for row in json.loads(data.read_text())["frame"]} == STORED


def test_the_regression_report_and_terminal_are_inert(hostile, tmp_path, capsys):
    first, last = summarizer_inputs(hostile)
    report = tmp_path / "r.md"
    summarize(["--baseline", str(first), "--candidate", str(last), "--output", str(report)])
    captured = capsys.readouterr()
    assert TERMINAL_CONTROLS.findall(captured.out + captured.err) == []
    assert markdown_problems(report.read_text()) == []
