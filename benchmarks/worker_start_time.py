"""A plugin worker's start, spawned or forked from the fork server: the decode ``cpu`` preset
with the SDPA example plugin, N times in one process (the first start includes the server's).

    python benchmarks/worker_start_time.py spawn 6
    python benchmarks/worker_start_time.py forkserver 6
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench_batch_decode
from fi_attn_bench.sweep import isolation, worker_start

PLUGIN = str(Path(__file__).resolve().parent.parent / "examples" / "sdpa_decode_plugin.py")


def main(mode: str, count: int) -> None:
    if mode == "spawn":  # the start every worker had before the fork server
        worker_start.context_for = lambda device_type: multiprocessing.get_context("spawn")
    starts: list[float] = []
    original = isolation.Worker.__init__

    def timed(self, setup):
        began = time.perf_counter()
        original(self, setup)
        starts.append(time.perf_counter() - began)

    isolation.Worker.__init__ = timed
    walls = []
    for _ in range(count):
        with tempfile.TemporaryDirectory() as out:
            err = io.StringIO()
            began = time.perf_counter()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                argv = ["--preset", "cpu", "--device", "cpu", "--output-dir", out]
                code = bench_batch_decode.main([*argv, "--impl", f"{PLUGIN}:make"])
            walls.append(time.perf_counter() - began)
            if code != 0:
                raise SystemExit(err.getvalue()[-2000:])
    later = starts[1:] or starts
    print(
        f"{mode}: worker start per sweep {[round(s, 2) for s in starts]} s; after the first: "
        f"median {statistics.median(later):.2f} s; sweep wall after the first: median "
        f"{statistics.median(walls[1:] or walls):.2f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
