"""What running ``--impl`` plugins in a worker process costs: the same sweep's wall time with
and without ``--no-isolation``, interleaved, on the CPU or a GPU.

    python benchmarks/isolation_cost.py                      # decode cpu preset, the SDPA example
    python benchmarks/isolation_cost.py --device cuda --preset default --repeats 3 \\
        --impl flashinfer --impl examples/sdpa_decode_plugin.py:make

Each run is a fresh process of the script (``bench_batch_decode.py``), timed from outside,
so the worker's start (spawn, torch's import, the timer's checks) is counted.  Prints one
line per run and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(args: argparse.Namespace, isolated: bool, out: Path) -> float:
    command = [
        sys.executable,
        str(ROOT / "bench_batch_decode.py"),
        "--preset",
        args.preset,
        "--device",
        args.device,
        "--output",
        str(out),
        "--force",
    ]
    for impl in args.impl or ["examples/sdpa_decode_plugin.py:make"]:
        command += ["--impl", impl]
    if not isolated:
        command.append("--no-isolation")
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"error: {' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--impl", action="append", help="as the script takes it (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for isolated in (repeat % 2 == 0, repeat % 2 != 0):  # alternate who goes first
                wall = _run(args, isolated, Path(folder) / f"r{repeat}{int(isolated)}.csv")
                walls[isolated].append(wall)
                print(f"run {repeat + 1} {'worker    ' if isolated else 'in-process'} {wall:.2f} s")
    worker, alone = statistics.median(walls[True]), statistics.median(walls[False])
    print(
        f"median sweep wall time: in-process {alone:.2f} s, worker {worker:.2f} s, "
        f"cost {worker - alone:+.2f} s ({(worker / alone - 1) * 100:+.0f} %)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
