"""FlashInfer's JIT cache made ready before timed sweeps: the four scripts run side by side at
the cheapest timing (FlashInfer guards each build with a file lock), numbers thrown away.

FlashInfer keeps the cache in ``FLASHINFER_WORKSPACE_BASE``; a warm cache makes this a short
pass of every case, so the parts always run it unless told to skip it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from validation.running import ROOT, python

WARM_UP_OPTIONS = (
    "--timer events --no-check --warmup-ms 1 --sustain-ms 0 --min-time-ms 0 "
    "--enough-samples 10 --max-time-per-case 0.05"
).split()


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def warm_jit(
    folder: Path, scripts: Sequence[str], preset: str = "default", extra: Sequence[str] = ()
) -> float:
    """Compile the kernel variants of ``preset`` for ``scripts``; returns the seconds it took
    (CSVs and logs in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    jobs = []
    for script in scripts:
        log = (folder / f"{Path(script).stem}.log").open("w", encoding="utf-8")
        command = python(
            str(ROOT / script), "--preset", preset, *WARM_UP_OPTIONS, *extra,
            "--output-dir", str(folder),
        )  # fmt: skip
        jobs.append((subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log), log))
    for job, log in jobs:
        job.wait()
        log.close()
    return time.perf_counter() - started
