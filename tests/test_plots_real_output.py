"""Every plot, drawn from real H100 output (tests/fixtures/real_csv, a copy of
shared/data/real_csv), keeps its text inside the figure; the forest plot and the case labels
say what they should.

The figures are caught at ``_save`` (the one place every renderer writes a PNG), so the test
sees exactly what the summarizer draws, through the summarizer's own model.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pd = pytest.importorskip("pandas")

from matplotlib.text import Text  # noqa: E402

from fi_attn_bench.summarizer import forest_plot, plots  # noqa: E402
from fi_attn_bench.summarizer.command_line import regression_plot_rows  # noqa: E402
from fi_attn_bench.summarizer.headtohead import (  # noqa: E402
    ApiComparison,
    CaseComparison,
    ImplResult,
    case_table,
)
from fi_attn_bench.summarizer.loading import load_run  # noqa: E402
from fi_attn_bench.summarizer.model import Gate, summarize, summary_plot_rows  # noqa: E402
from fi_attn_bench.summarizer.regression import compare  # noqa: E402

REAL = Path(__file__).parent / "fixtures" / "real_csv"
RUNS = ("h100_decode_default.csv", "h100_paged_serving.csv", "h100_ragged_fa2_vs_fa3.csv")
HEAD_TO_HEAD = REAL / "h100_ragged_fa2_vs_fa3.csv"
TIME_COLUMNS = ("time_ms", "time_min_ms", "time_q1_ms", "time_q3_ms", "time_max_ms")
SLACK_PX = 1.0  # rounding of a text's extent


@pytest.fixture()
def drawn(monkeypatch):
    """{file name: figure} of every PNG the renderers write."""
    figures = {}
    save = plots._save

    def keep(figure, path):
        figures[Path(path).name] = figure
        return save(figure, path)

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(forest_plot, "_save", keep)
    return figures


def drawn_texts(figure) -> list[Text]:
    """The texts a draw shows: visible, not empty, and no tick label of a tick outside its
    axis's view (matplotlib keeps those, undrawn)."""
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    hidden = set()
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                where = tick.get_loc()
                if where is None or not low - 1e-9 * abs(low) <= where <= high + 1e-9 * abs(high):
                    hidden |= {id(tick.label1), id(tick.label2)}
    return [
        text
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and id(text) not in hidden
    ]


def clipped(figure) -> list[str]:
    """The texts whose drawn extent leaves the figure."""
    box = figure.bbox
    renderer = figure.canvas.get_renderer()
    out = []
    for text in drawn_texts(figure):
        extent = text.get_window_extent(renderer)
        inside = (
            box.x0 - SLACK_PX <= extent.x0
            and extent.x1 <= box.x1 + SLACK_PX
            and box.y0 - SLACK_PX <= extent.y0
            and extent.y1 <= box.y1 + SLACK_PX
        )
        if not inside:
            out.append(f"{text.get_text()[:60]!r} at {extent.bounds}")
    return out


def slower_copy(source: Path, folder: Path) -> Path:
    """The run with every third case 8 % slower or 10 % faster: a candidate with changes."""
    rows = pd.read_csv(source, dtype=str, keep_default_na=False)
    for index in range(0, len(rows), 3):
        for column in TIME_COLUMNS:
            if rows.loc[index, column]:
                factor = 1.08 if index % 2 else 0.9
                rows.loc[index, column] = repr(float(rows.loc[index, column]) * factor)
    path = folder / f"candidate_{source.name}"
    rows.to_csv(path, index=False)
    return path


def test_every_summary_and_forest_plot_of_real_runs_keeps_its_text_inside(drawn, tmp_path):
    for name in RUNS:
        model = summarize(load_run([REAL / name]))
        plots.render_summary_plots(summary_plot_rows(model), tmp_path)
        forest_plot.render_forest_plots(model.head_to_head, tmp_path)
    expected = {
        f"{api}_{kind}.png"
        for api in (
            "BatchDecodeWithPagedKVCacheWrapper",
            "BatchPrefillWithPagedKVCacheWrapper",
            "BatchPrefillWithRaggedKVCacheWrapper",
        )
        for kind in ("scaling", "roofline")
    } | {"BatchPrefillWithRaggedKVCacheWrapper_forest.png"}
    assert set(drawn) == expected
    problems = {name: clipped(figure) for name, figure in drawn.items()}
    assert {name: texts for name, texts in problems.items() if texts} == {}


def test_every_speedup_plot_of_real_runs_keeps_its_text_inside(drawn, tmp_path):
    for name in RUNS[:2]:
        baseline = load_run([REAL / name])
        candidate = load_run([slower_copy(REAL / name, tmp_path)])
        model = compare(baseline, candidate, Gate(5.0))
        assert model.state_counts.get("regression", 0) > 0
        plots.render_regression_plots(regression_plot_rows(model), 5.0, tmp_path)
    assert set(drawn) == {
        "BatchDecodeWithPagedKVCacheWrapper_speedup.png",
        "BatchPrefillWithPagedKVCacheWrapper_speedup.png",
    }
    problems = {name: clipped(figure) for name, figure in drawn.items()}
    assert {name: texts for name, texts in problems.items() if texts} == {}
    # the labels carry the fields that vary; the shared ones are said once, in the footnote
    figure = drawn["BatchDecodeWithPagedKVCacheWrapper_speedup.png"]
    ax = figure.axes[0]
    labels = [text.get_text() for text in ax.get_yticklabels()]
    assert len(labels) == 27 and all("batch_size=" in label for label in labels)
    assert not any("seq_len_q" in label or "num_qo_heads" in label for label in labels)
    footnote = figure.get_supxlabel()
    assert "every case: seq_len_q=1, num_qo_heads=32, impl=flashinfer" in footnote.replace(
        "\n", " "
    )
    regressions = [bar for bar in ax.patches if bar.get_width() < 0]
    top = max(bar.get_y() for bar in ax.patches)
    assert regressions and any(bar.get_y() == top for bar in regressions)  # slowest on top


def test_the_forest_plot_has_a_row_per_case_and_the_line_at_one(drawn, tmp_path):
    model = summarize(load_run([HEAD_TO_HEAD]))
    (path,) = forest_plot.render_forest_plots(model.head_to_head, tmp_path)
    assert path.name == "BatchPrefillWithRaggedKVCacheWrapper_forest.png" and path.stat().st_size
    figure = drawn[path.name]
    ax = figure.axes[0]
    at_one = [line for line in ax.lines if list(line.get_xdata()) == [1.0, 1.0]]
    assert len(at_one) == 1
    labels = [text.get_text() for text in ax.get_yticklabels()]
    assert len(labels) == len(set(labels)) == 20  # one row per case
    points = [container[0] for container in ax.containers]
    assert sum(len(line.get_xdata()) for line in points) == 20
    assert not any("num_qo_heads" in label or "impl=" in label for label in labels)
    footnote = figure.get_supxlabel().replace("\n", " ")
    assert "num_qo_heads=32, num_kv_heads=4, head_dim_vo=128" in footnote
    assert "flashinfer:fa2" in footnote
    values = [text.get_text() for text in figure.axes[1].get_yticklabels()]
    ratios = [float(value.split()[0]) for value in values]
    assert ratios == sorted(ratios)  # rows drawn bottom-up: the largest ratio at the top
    assert values[-1] == "0.922 [0.910, 0.923]"  # batch_size=64, seq_len=256 (the CSV's row 21)
    assert labels[-1] == "batch_size=64, seq_len=256, head_dim_qk=192"
    assert {text.get_text() for text in ax.get_legend().get_texts()} == {"faster"}


def synthetic_comparison(count: int) -> ApiComparison:
    """``count`` cases of mixed verdicts (every seventh without an interval)."""
    cases = []
    for index in range(count):
        ratio = 0.6 + 0.8 * ((index * 37) % count) / max(count - 1, 1)
        verdict = "faster" if ratio < 0.98 else "slower" if ratio > 1.02 else "same"
        has_interval = index % 7 != 3
        low, high = (ratio * 0.97, ratio * 1.02) if has_interval else (math.nan, math.nan)
        label = f"batch_size={2 ** (index % 8)}, seq_len={128 * (index + 1)}, head_dim=128"
        cases.append(
            CaseComparison(
                label,
                (
                    ImplResult("base", 1.0, 1.0, math.nan, math.nan),
                    ImplResult("mine", ratio, 1 / ratio, 1 / high, 1 / low, verdict),
                ),
                "mine",
            )
        )
    impls = ("base", "mine")
    return ApiComparison("decode", "base", impls, case_table(impls, cases), {})


@pytest.mark.parametrize("count", [5, 40, 200])
def test_the_forest_plot_stays_readable_from_5_to_200_cases(drawn, tmp_path, count):
    (path,) = forest_plot.render_forest_plots([synthetic_comparison(count)], tmp_path)
    figure = drawn[path.name]
    assert clipped(figure) == []
    shown = min(count, forest_plot.MAX_ROWS)
    assert len(figure.axes[0].get_yticklabels()) == shown
    height = figure.get_figheight()
    assert height == pytest.approx(plots.ROW_BASE_INCHES + plots.ROW_INCHES * max(shown, 5))
    title = figure.get_suptitle().replace("\n", " ")
    assert (f"the {shown} furthest from 1 of {count} shown" in title) == (count > shown)
    ratios = [float(t.get_text().split()[0]) for t in figure.axes[1].get_yticklabels()]
    if count > shown:  # the most extreme were kept: none kept is nearer 1 than one left out
        assert min(abs(math.log(r)) for r in ratios) >= 0.1


def test_shown_rows_keep_the_most_extreme_and_sort_by_ratio():
    rows = [
        forest_plot.ForestRow(f"case={i}", r, r, r, "") for i, r in enumerate([1.0, 0.5, 2.5, 1.1])
    ]
    assert [row.ratio for row in forest_plot.shown_rows(rows, limit=2)] == [0.5, 2.5]
    assert [row.ratio for row in forest_plot.shown_rows(rows)] == [0.5, 1.0, 1.1, 2.5]


def test_the_scaling_legend_sits_outside_every_panel(drawn, tmp_path):
    model = summarize(load_run([REAL / "h100_decode_default.csv"]))
    plots.render_summary_plots(summary_plot_rows(model), tmp_path)
    figure = drawn["BatchDecodeWithPagedKVCacheWrapper_scaling.png"]
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    (legend,) = figure.legends
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in figure.axes)
    names = [text.get_text() for text in legend.get_texts()]
    assert names[:6] == [f"batch_size={b}" for b in (1, 8, 16, 64, 128, 256)]
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert titles and not any("num_qo_heads" in title for title in titles)
    assert "every case: seq_len_q=1, num_qo_heads=32, impl=flashinfer" in figure.get_supxlabel()


def test_the_clipping_check_finds_a_label_out_of_the_figure():
    figure = plots._figure(4.0, 3.0)
    ax = figure.subplots()
    ax.text(1.2, 0.5, "past the right edge", transform=ax.transAxes)
    assert [problem.split(" at ")[0] for problem in clipped(figure)] == ["'past the right edge'"]


def test_hostile_names_are_drawn_as_text(drawn, tmp_path):
    """A "$" in a CSV would start matplotlib's math mode; an unbalanced formula failed the
    draw (exit 2, no plots)."""
    rows = pd.read_csv(HEAD_TO_HEAD, dtype=str, keep_default_na=False)
    names = {"flashinfer:fa2": "base$", "flashinfer:fa3": "mine$\\frac{a$ <b>"}
    for column in ("impl", "baseline_impl"):
        rows[column] = rows[column].map(lambda name: names.get(name, name))
    rows["api"] = "Ragged$x^$"
    rows.loc[rows.index // 2 % 4 == 0, "head_dim_vo"] = "$128"  # both rows of a case
    path = tmp_path / "hostile.csv"
    rows.to_csv(path, index=False)
    model = summarize(load_run([path]))
    plots.render_summary_plots(summary_plot_rows(model), tmp_path)
    forest_plot.render_forest_plots(model.head_to_head, tmp_path)
    assert {name.rsplit("_", 1)[1] for name in drawn} == {
        "scaling.png",
        "roofline.png",
        "forest.png",
    }
    problems = {name: clipped(figure) for name, figure in drawn.items()}
    assert {name: texts for name, texts in problems.items() if texts} == {}
    forest = next(figure for name, figure in drawn.items() if name.endswith("_forest.png"))
    assert "base\\$" in forest.get_supxlabel()  # drawn as "base$"
    assert any("head_dim_vo=\\$128" in t.get_text() for t in forest.axes[0].get_yticklabels())
