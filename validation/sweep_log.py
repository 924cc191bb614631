"""What the validation parts read back from a sweep's printed log."""

from __future__ import annotations

import re

SWEEP_WALL = re.compile(r"Sweep wall time ([0-9.]+) s")
"""The line each script's sweep ends with (written by ``fi_attn_bench.sweep.run``)."""


def sweep_wall_s(text: str) -> float:
    """The sum of a log's "Sweep wall time X s" lines (one per script)."""
    return sum(float(found.group(1)) for found in SWEEP_WALL.finditer(text))
