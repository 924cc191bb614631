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
