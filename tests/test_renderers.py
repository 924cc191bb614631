"""The summarizer's formats share one interface: the model's kind picks the function."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fi_attn_bench.summarizer.model import ReportKind, SummaryModel
from fi_attn_bench.summarizer.regression import RegressionModel
from fi_attn_bench.summarizer.renderers import JSON, MARKDOWN, TERMINAL, Renderer


@pytest.mark.parametrize(
    ("kind", "text"), [(ReportKind.SUMMARY, "s"), (ReportKind.REGRESSION, "r")]
)
def test_a_renderer_picks_its_function_by_the_models_kind(kind, text):
    renderer = Renderer("probe", lambda model, width: f"s{width}", lambda model, width: f"r{width}")
    assert renderer.render(SimpleNamespace(kind=kind), 80) == f"{text}80"


def test_each_model_states_its_kind_and_every_format_renders_both():
    assert SummaryModel.kind is ReportKind.SUMMARY
    assert RegressionModel.kind is ReportKind.REGRESSION
    for renderer in (MARKDOWN, TERMINAL, JSON):
        assert callable(renderer.summary) and callable(renderer.regression)


def test_history_reports_render_through_the_same_interface():
    """fi-attn-history's dashboard and digest are renderers of a history model; a format
    asked for a kind it has no function for says so."""
    from fi_attn_bench.history import report

    assert report.HistoryReport.kind is ReportKind.HISTORY
    assert isinstance(report.HTML, Renderer) and report.HTML.history is report.render_html
    assert report.MARKDOWN.history is report.render_markdown
    assert (report.MARKDOWN.summary, report.MARKDOWN.regression) == (
        MARKDOWN.summary,
        MARKDOWN.regression,
    )
    with pytest.raises(TypeError, match="the html format renders no summary model"):
        report.HTML.render(SimpleNamespace(kind=ReportKind.SUMMARY))
    with pytest.raises(TypeError, match="the terminal format renders no history model"):
        TERMINAL.render(SimpleNamespace(kind=ReportKind.HISTORY))


def test_the_kind_stays_out_of_the_json_report(tmp_path):
    """The kind is the class's, not a field: the JSON keeps the fields it always had."""
    import json

    import summarize_results

    fixture = "tests/fixtures/summarizer/new_decode.csv"
    argv = [fixture, "--output", str(tmp_path / "s.md"), "--json", str(tmp_path / "s.json")]
    assert summarize_results.main(argv) == 0
    keys = list(json.loads((tmp_path / "s.json").read_text()))
    assert keys[0] == "paths" and "kind" not in keys and keys[-1] == "exit_code"
