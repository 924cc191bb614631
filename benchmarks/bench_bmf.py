"""Time --bmf's export (Bencher Metric Format JSON) on grown real runs.

    python benchmarks/bench_bmf.py [--rows 200000] [--repeat 3] [--data-dir /tmp/fi-summarizer-bench]

For each real H100 CSV in tests/fixtures/real_csv/ it grows a run of ``--rows`` rows (the same
generated files as benchmarks/bench_summarizer.py), builds the summary model once, and times
``summarizer.bmf.bmf_json`` alone: the best wall and CPU (process) time of ``--repeat`` runs,
and the size of the text. The export is what --bmf adds to a summarizer run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_summarizer import TEMPLATES, ensure_inputs  # noqa: E402
from fi_attn_bench.summarizer.bmf import bmf_json  # noqa: E402
from fi_attn_bench.summarizer.loading import load_run  # noqa: E402
from fi_attn_bench.summarizer.model import summarize  # noqa: E402


def time_export(model, repeat: int) -> tuple[float, float, int]:
    """(best wall s, best CPU s, bytes) of ``repeat`` exports of one model."""
    walls, cpus, size = [], [], 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        text = bmf_json(model)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        size = len(text.encode("utf-8"))
    json.loads(text)  # the text is JSON
    return min(walls), min(cpus), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/fi-summarizer-bench"))
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print("| run | rows | export wall s (best) | export CPU s (best) | BMF MB |")
    print("|---|---:|---:|---:|---:|")
    for template in TEMPLATES:
        base, _ = ensure_inputs(args.data_dir, template, args.rows)
        model = summarize(load_run([base]))
        wall, cpu, size = time_export(model, args.repeat)
        print(f"| {template.stem} | {args.rows} | {wall:.2f} | {cpu:.2f} | {size / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
