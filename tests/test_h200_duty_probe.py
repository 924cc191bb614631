"""benchmarks/h200_duty_probe.py's reading of nvidia-smi's log, on the CPU."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import h200_duty_probe as probe  # noqa: E402


def smi_line(stamp: float, values: str) -> str:
    whole = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(stamp))
    return f"{whole}.{int(stamp % 1 * 1000):03d}, {values}"


def test_smi_means_averages_the_samples_inside_the_window_only(tmp_path):
    start = float(int(time.time()))
    log = tmp_path / "smi.csv"
    log.write_text(
        "\n".join(
            [
                smi_line(start - 0.5, "1000, 3201, 100, 30"),  # before the window
                smi_line(start + 0.2, "1980, 3201, 650, 55"),
                smi_line(start + 0.6, "1900, 3201, 640, 57"),
                "not a sample",
                smi_line(start + 1.5, "500, 3201, 90, 30"),  # after it
            ]
        )
    )
    assert probe.smi_means(log, start, start + 1.0) == "1940 | 3201 | 645 | 56"


def test_smi_means_says_when_nothing_was_sampled(tmp_path):
    log = tmp_path / "smi.csv"
    log.write_text("")
    assert probe.smi_means(log, 0.0, 1.0) == "n/a | n/a | n/a | n/a"
