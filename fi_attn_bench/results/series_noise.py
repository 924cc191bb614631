"""The run-to-run noise of one series of log times, shared by change-point detection
(``fi-attn-history``) and the regression gate's ``--noise-from``."""

from __future__ import annotations

import numpy as np

SIGMA_FLOOR = 5e-4  # 0.05 %: below this, noise is rounding and a penalty would explode
MIN_SERIES_RUNS = 10  # fewer runs give no trustworthy noise estimate


def mad(values: np.ndarray) -> float:
    """Median absolute deviation scaled to a normal standard deviation."""
    if len(values) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


def noise_level(series: np.ndarray) -> float:
    """Run-to-run noise of a series: the spread of its successive differences (steps
    touch one difference each), winsorized at four robust deviations so a blip counts
    but cannot dominate, and a bimodal case shows its full spread."""
    differences = np.diff(series)
    scale = max(mad(differences), SIGMA_FLOOR)
    clipped = np.clip(
        differences, np.median(differences) - 4 * scale, np.median(differences) + 4 * scale
    )
    return max(float(np.std(clipped)) / np.sqrt(2), SIGMA_FLOOR)
