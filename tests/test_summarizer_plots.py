"""Renderers of plots: valid, non-trivial, deterministic PNGs from small tables."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pd = pytest.importorskip("pandas")

from fi_attn_bench.summarizer import plots  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "plots"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DECODE = "BatchDecodeWithPagedKVCacheWrapper"
PREFILL = "BatchPrefillWithRaggedKVCacheWrapper"
PEAKS = {"bandwidth_GB_s": 4300.0, "tflops": 790.0, "source": "measured 2026-12-02"}


def png_size(path: Path) -> tuple[int, int]:
    """Check a PNG file and return (width, height) from its IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert len(data) > 5_000, f"{path.name} is only {len(data)} bytes"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    assert 300 <= width <= 6_000 and 200 <= height <= 6_000, (width, height)
    return width, height


def summary_rows(peaks: dict | None = PEAKS) -> pd.DataFrame:
    rows = pd.read_csv(FIXTURES / "summary_rows.csv")
    if peaks is not None:
        rows.attrs["peaks"] = dict(peaks)
    return rows


def matched_rows() -> pd.DataFrame:
    return pd.read_csv(FIXTURES / "regression_matched.csv")


def decode_grid(head_configs: int = 2, batches=(1, 8), seqs=(512, 2048, 8192)) -> pd.DataFrame:
    records = []
    for heads in range(head_configs):
        for batch in batches:
            for seq in seqs:
                time_ms = 0.01 + batch * seq * 1e-6 * (heads + 1)
                records.append(
                    {
                        "api": "decode",
                        "batch_size": batch,
                        "seq_len_kv": seq,
                        "num_qo_heads": 32 * (heads + 1),
                        "head_dim": 128,
                        "status": "ok",
                        "time_ms": time_ms,
                        "bandwidth_GB_s": batch * seq * 0.5 / time_ms,
                        "tflops": batch * seq * 1e-5 / time_ms,
                        "arithmetic_intensity": 2.0 * (heads + 1),
                        "pct_peak_bw": math.nan,
                        "pct_peak_tflops": math.nan,
                        "case_label": f"h{heads} bs={batch} kv={seq}",
                    }
                )
    return pd.DataFrame(records)


def test_summary_plots_from_csv_fixture(tmp_path):
    paths = plots.render_summary_plots(summary_rows(), tmp_path)
    assert [p.name for p in paths] == [
        f"{DECODE}_scaling.png",
        f"{DECODE}_roofline.png",
        f"{PREFILL}_scaling.png",  # no arithmetic intensity: no roofline
    ]
    for path in paths:
        assert path.parent == tmp_path
        png_size(path)
    width, height = png_size(paths[0])
    assert height > 500  # two rows of panels: time above bandwidth


def test_summary_plots_without_peaks_still_render_roofline(tmp_path):
    paths = plots.render_summary_plots(decode_grid(head_configs=1), tmp_path)
    assert [p.name for p in paths] == ["decode_scaling.png", "decode_roofline.png"]
    for path in paths:
        png_size(path)


def test_only_ok_rows_are_drawn(tmp_path):
    rows = decode_grid()
    rows["status"] = "failed"
    assert plots.render_summary_plots(rows, tmp_path) == []
    assert list(tmp_path.iterdir()) == []
    rows = decode_grid()
    rows.loc[rows.index[:-1], "status"] = "failed"  # one legacy ok row remains
    rows.loc[rows.index[-1], "status"] = "legacy_inferred_ok"
    names = [p.name for p in plots.render_summary_plots(rows, tmp_path)]
    assert names == ["decode_scaling.png", "decode_roofline.png"]


def test_panels_are_capped_and_counted():
    rows = decode_grid(head_configs=9)
    facets = plots._facet_columns(rows, ("seq_len_kv", "batch_size"))
    assert facets == ["num_qo_heads"]  # head_dim is constant, case_label is model data
    panels, omitted = plots._panels(rows, facets)
    assert (len(panels), omitted) == (plots.MAX_PANELS, 3)
    assert panels[0][0] == "num_qo_heads=32"


def test_panel_titles_leave_out_a_uniform_batchs_empty_workload():
    rows = decode_grid(head_configs=2)
    rows["workload"] = ["3d@40" if i % 2 else "" for i in range(len(rows))]
    facets = plots._facet_columns(rows, ("seq_len_kv", "batch_size"))
    assert facets == ["num_qo_heads", "workload"]
    titles = sorted(title.replace("\n", " ") for title, _ in plots._panels(rows, facets)[0])
    assert titles == [
        "num_qo_heads=32",
        "num_qo_heads=32, workload=3d@40",
        "num_qo_heads=64",
        "num_qo_heads=64, workload=3d@40",
    ]


def test_rows_without_sequence_length_get_only_a_roofline(tmp_path):
    rows = decode_grid().drop(columns=["seq_len_kv"])
    names = [p.name for p in plots.render_summary_plots(rows, tmp_path)]
    assert names == ["decode_roofline.png"]


def test_regression_plots_from_csv_fixture(tmp_path):
    paths = plots.render_regression_plots(matched_rows(), 5.0, tmp_path)
    # the MLA API has no case ok in both runs: nothing to draw
    assert [p.name for p in paths] == [f"{DECODE}_speedup.png", f"{PREFILL}_speedup.png"]
    for path in paths:
        png_size(path)


def test_regression_plot_without_gate_leaves_the_global_backend_alone(tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    paths = plots.render_regression_plots(matched_rows(), None, tmp_path)
    assert len(paths) == 2
    png_size(paths[0])
    assert matplotlib.get_backend() == backend


def test_hundreds_of_cases_use_rank_axis(tmp_path):
    count = 400
    matched = pd.DataFrame(
        {
            "api": "decode",
            "case_label": [f"case {i}" for i in range(count)],
            "speedup": [0.5 + 3.0 * ((i * 37) % count) / count for i in range(count)],
        }
    )
    matched["state"] = ["regression" if s < 1 / 1.05 else "compared" for s in matched.speedup]
    (path,) = plots.render_regression_plots(matched, 5.0, tmp_path)
    width, _ = png_size(path)
    assert width <= 1_200  # no per-case tick labels stretching the figure


def test_output_is_deterministic(tmp_path):
    rows = decode_grid(head_configs=1)
    rows.attrs["peaks"] = dict(PEAKS)
    first = plots.render_summary_plots(rows, tmp_path / "a")
    second = plots.render_summary_plots(rows, tmp_path / "b")
    assert len(first) == 2
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    first = plots.render_regression_plots(matched_rows(), 5.0, tmp_path / "a")
    second = plots.render_regression_plots(matched_rows(), 5.0, tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


@pytest.mark.parametrize(
    ("api", "stem"),
    [
        ("BatchDecodeWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper"),
        ("mla.v2-fa3", "mla.v2-fa3"),
    ],
)
def test_safe_file_stem_keeps_safe_names(api, stem):
    assert plots.safe_file_stem(api) == stem


def test_safe_file_stem_rewrites_unsafe_names_deterministically():
    stem = plots.safe_file_stem("../decode wrapper/x")
    assert "/" not in stem and " " not in stem and not stem.startswith(".")
    assert stem == plots.safe_file_stem("../decode wrapper/x")
    assert stem != plots.safe_file_stem("../decode wrapper_x")


def test_gate_speedup():
    assert plots.gate_speedup(5.0) == pytest.approx(1 / 1.05)
    assert plots.gate_speedup(0.0) == 1.0


def test_speedup_plot_layout_keeps_labels_readable():
    """The y label was cut, the legend covered the gate label, and case labels took about
    60 % of the figure's height; the cases are now rows labelled by the fields that vary, the
    gate is a legend entry above the axes, and the shared fields are in the footnote."""
    from fi_attn_bench.summarizer.plots import speedup_figure

    labels = [
        f"batch_size={b}, seq_len_q=1, seq_len_kv={kv}, num_qo_heads=32, num_kv_heads=4, "
        f"head_dim={hd}"
        for b in (1, 8, 64)
        for kv in (128, 1024, 4096, 16384)
        for hd in (64, 128, 256)
    ][:30]
    speedups = [0.77, 0.9, 0.93, 0.98, 1.0, 1.1] * 5
    states = ["regression" if s < 0.95 else "compared" for s in speedups]
    rows = pd.DataFrame(
        {"api": "Decode", "case_label": labels, "state": states, "speedup": speedups}
    )
    figure = speedup_figure("Decode", rows, 5.0)
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    box = figure.bbox
    ax = figure.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()][-1] == "gate: 5% slower = ×0.952"
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    ticks = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text()]
    assert len(ticks) == 30
    assert max(t.x1 for t in ticks) - min(t.x0 for t in ticks) < 0.5 * box.width
    for text in (ax.get_yticklabels()[0], figure._supxlabel, figure._suptitle, legend):
        extent = text.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0
        assert extent.y1 <= box.y1
    assert "seq_len_q=1" not in ax.get_yticklabels()[0].get_text()  # shared: in the footnote
    assert "seq_len_q=1, num_qo_heads=32" in figure.get_supxlabel().replace("\n", " ")
