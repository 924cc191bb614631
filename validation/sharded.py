"""Sharded sweeps on the GPU, each against a one-process sweep of the same preset at the 5 % gate.

    python -m validation sharded WORK_DIR [--mode one|two|both] [--sweep-args '...']

two (needs 2 GPUs): ``torchrun --nproc-per-node 2`` over the default preset of all four scripts
into WORK_DIR/two/A, then one process of the same preset into WORK_DIR/two/B; one (one GPU):
``torchrun --nproc-per-node 1`` over the smoke preset against a plain run.  Each part prints
the shard report (``python -m validation shard-report``: CSVs, devices, the cases once each,
both wall times), the highest GPU utilization seen during A, and the summarizer's gate of A
against B.  both (default): one, then two when two GPUs are visible.
Exit 0 when every part ran with the same cases and no regression, else 1; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from validation import shard_report
from validation.jit import gpu_available, warm_jit
from validation.running import SCRIPTS, python, run_logged, tail

GATE_PCT = "5"
NVIDIA_SMI = (
    "nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader",
    "-lms", "500",
)  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One comparison: a torchrun of ``processes`` ranks against one process, over ``preset``."""

    name: str
    processes: int
    preset: str


PARTS = {"one": Part("one", 1, "smoke"), "two": Part("two", 2, "default")}


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def utilization(samples: Path) -> list[str]:
    """Highest utilization % and memory MiB per GPU index from nvidia-smi's samples."""
    most: dict[str, tuple[int, int]] = {}
    for line in samples.read_text().splitlines() if samples.exists() else []:
        fields = [f.split()[0] for f in line.split(", ")]
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            use, memory = most.get(fields[0], (0, 0))
            most[fields[0]] = (max(use, int(fields[1])), max(memory, int(fields[2])))
    return [f"  cuda:{i}  {u} %  {m} MiB" for i, (u, m) in sorted(most.items())]


def run_part(out: Path, part: Part, extra: Sequence[str]) -> int:
    folder = out / part.name
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"\n== {part.name}: torchrun --nproc-per-node {part.processes} vs one process, preset {part.preset}"
    )
    sweep = ("bench_all.py", "--preset", part.preset)
    with (folder / "gpu_use.csv").open("w") as samples:
        try:
            smi = subprocess.Popen(NVIDIA_SMI, stdout=samples, stderr=subprocess.DEVNULL)
        except FileNotFoundError:
            smi = None
        a = run_logged(
            python("-m", "torch.distributed.run", "--nproc-per-node", str(part.processes),
                   *sweep, "--output-dir", str(folder / "A"), *extra),
            folder / "A.out",
        )  # fmt: skip
        if smi:
            smi.terminate()
    b = run_logged(python(*sweep, "--output-dir", str(folder / "B"), *extra), folder / "B.out")
    print(f"  A: exit {a.exit_code}, {a.wall_s:.1f} s; B: exit {b.exit_code}, {b.wall_s:.1f} s")
    print("GPU utilization during A (highest %, most memory MiB per GPU index):")
    print("\n".join(utilization(folder / "gpu_use.csv")))
    status = int(bool(a.exit_code or b.exit_code))
    status |= shard_report.main(
        ["--sharded", str(folder / "A"), "--single", str(folder / "B"),
         "--rank0-log", str(folder / "A.out"),
         "--sharded-wall-s", f"{a.wall_s:.1f}", "--single-wall-s", f"{b.wall_s:.1f}"]
    )  # fmt: skip
    gate = run_logged(
        python("summarize_results.py", "--baseline", *map(str, sorted((folder / "B").glob("*.csv"))),
               "--candidate", *map(str, sorted((folder / "A").glob("*.csv"))),
               "--fail-on-regression", GATE_PCT, "--output", str(folder / "regression.md")),
        folder / "summarize.out",
    ).exit_code  # fmt: skip
    print(f"summarize_results.py --fail-on-regression {GATE_PCT}: exit {gate}")
    print(tail(folder / "summarize.out", 8))
    return 1 if status or gate else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m validation sharded", description=__doc__.partition("\n\n")[0]
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--mode", choices=("one", "two", "both"), default="both")
    parser.add_argument("--sweep-args", default="", help="more options for every sweep, one string")
    args = parser.parse_args(argv)
    extra = shlex.split(args.sweep_args)
    args.out.mkdir(parents=True, exist_ok=True)
    gpus = gpu_count() if gpu_available() else 0
    print(f"GPUs visible: {gpus}")
    if gpus:
        with tempfile.TemporaryDirectory() as scratch:
            warm_jit(Path(scratch), SCRIPTS, "default")
    status = 0
    if args.mode in ("one", "both"):
        status |= run_part(args.out, PARTS["one"], extra)
    if args.mode == "two" or (args.mode == "both" and gpus >= 2):
        status |= run_part(args.out, PARTS["two"], extra)
    elif args.mode == "both":
        print(f"two: skipped, {gpus} GPU(s) visible ('--mode two' forces it)")
    return status
