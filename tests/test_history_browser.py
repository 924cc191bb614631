"""The history dashboard in a real browser (headless Chromium): every chart renders, the filter works."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from fi_attn_bench.history.command_line import main
from tests.test_history import REAL, noisy_factors, write_runs

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found (Debian: apt-get install -y chromium; .ci/run tries it)",
)


def rendered_dom(page, fragment: str = "") -> str:
    """The page's DOM after its scripts ran, as Chromium serializes it."""
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"{page.as_uri()}{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dash")
    factors = noisy_factors(15, 27, seed=11)
    factors[9:, 4] *= 1.08
    store = tmp_path / "h.sqlite"
    paths = [*write_runs(tmp_path / "in", factors), REAL / "h100_paged_serving.csv"]
    assert main(["add", *map(str, paths), "--store", str(store)]) == 0
    html = tmp_path / "report.html"
    assert main(["report", "--store", str(store), "--html", str(html)]) == 0
    return html


def chart_boxes(dom: str) -> list[str]:
    return re.findall(r'<div class="chart"[^>]*>', dom)


def test_every_case_chart_is_drawn(dashboard):
    dom = rendered_dom(dashboard)
    boxes = chart_boxes(dom)
    assert len(boxes) == 37  # 27 decode cases over 15 runs, 10 paged cases in one run
    assert sum('data-points="15"' in box for box in boxes) == 27
    assert sum('data-points="1"' in box for box in boxes) == 10
    assert dom.count("<polyline") == 37
    assert dom.count('class="cp"') == 1  # the one change point, drawn on its chart
    assert "37 of 37 charts" in dom


def test_the_filters_hide_other_cases(dashboard):
    dom = rendered_dom(dashboard, "#field=seq_len_kv%3D512")
    shown = [box for box in chart_boxes(dom) if 'data-shown="1"' in box]
    assert len(shown) == 4 and all("seq_len_kv&quot;:&quot;512&quot;" in box for box in shown)
    assert "4 of 37 charts" in dom
    dom = rendered_dom(dashboard, "#api=BatchPrefillWithPagedKVCacheWrapper")
    shown = [box for box in chart_boxes(dom) if 'data-shown="1"' in box]
    assert len(shown) == 10 and all("BatchPrefillWithPagedKVCacheWrapper" in box for box in shown)
    assert "10 of 37 charts" in dom


def test_each_chart_has_a_y_axis_in_ms_and_run_labels(dashboard):
    dom = rendered_dom(dashboard)
    y_axes = re.findall(r'<g class="y-axis">([\s\S]*?)</g>', dom)
    x_axes = re.findall(r'<g class="x-axis">([\s\S]*?)</g>', dom)
    assert len(y_axes) == len(x_axes) == 37
    for axis in y_axes:
        ticks = re.findall(r'class="tick">([^<]*)</text>', axis)
        assert len(ticks) >= 2 and all(tick.endswith(" ms") for tick in ticks), axis
        assert "time (ms)" in axis
    assert sum("2026-01-01 00:00" in axis for axis in x_axes) == 27  # the first run's start
    assert sum("2026-01-01 00:14" in axis for axis in x_axes) == 27  # the last run's
    assert sum("99b5155" in axis for axis in x_axes) == 10  # the paged run's commit


def test_titles_leave_out_what_every_chart_shares(dashboard):
    dom = rendered_dom(dashboard)
    titles = re.findall(r"<h3>([^<]*)</h3>", dom)
    assert len(titles) == 37
    common = re.search(r'<span id="common">([^<]*)</span>', dom).group(1)
    assert "device=NVIDIA H100 80GB HBM3" in common and "impl=flashinfer" in common
    assert not any("NVIDIA H100" in title or "[flashinfer]" in title for title in titles)
    assert "break-all" not in dashboard.read_text()  # titles wrap between words


def test_the_changes_table_follows_the_filter(dashboard):
    def table_rows(dom: str) -> int:
        return int(re.search(r'<tbody data-rows="(\d+)"', dom).group(1))

    assert table_rows(rendered_dom(dashboard)) == 1  # batch_size=16, seq_len_kv=512 stepped
    assert table_rows(rendered_dom(dashboard, "#api=BatchPrefillWithPagedKVCacheWrapper")) == 0
    assert table_rows(rendered_dom(dashboard, "#field=batch_size%3D16,seq_len_kv%3D512")) == 1
    dom = rendered_dom(dashboard, "#field=seq_len_kv%3D2048")
    assert table_rows(dom) == 0 and "no change point" in dom


def screenshot(page, out, size: str = "1000,1400") -> None:
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            f"--window-size={size}",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0 and out.exists(), result.stderr[-2000:]


def longest_runs(dark, axis: int) -> int:
    """The longest unbroken line of dark pixels along ``axis`` (0: a column, 1: a row)."""
    import numpy as np

    best = 0
    for line in np.moveaxis(dark, axis, -1).reshape(-1, dark.shape[axis]):
        padded = np.concatenate(([0], line.astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(padded))
        if len(edges):
            best = max(best, int((edges[1::2] - edges[::2]).max()))
    return best


def test_a_screenshot_shows_both_axes(tmp_path, dashboard):
    from matplotlib.image import imread

    page = tmp_path / "one.html"
    store = dashboard.parent / "h.sqlite"
    argv = ["report", "--store", str(store), "--html", str(page)]
    assert main([*argv, "--cases", "batch_size=1,seq_len_kv=512,num_kv_heads=4"]) == 0
    png = tmp_path / "shot.png"
    screenshot(page, png)
    pixels = imread(png)[..., :3] * 255
    gray = (pixels.max(axis=2) - pixels.min(axis=2)) < 12  # no hue: axes and text, not the data
    dark = gray & (pixels.mean(axis=2) < 200)  # darker than the gridlines (#e4e4e4)
    assert longest_runs(dark, 0) >= 120  # the y axis: 142 px of the chart's 190
    assert longest_runs(dark, 1) >= 340  # the x axis: 366 px; a form field is under 300
