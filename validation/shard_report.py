"""What a sharded sweep did, against a one-process sweep of the same preset: a short table.

For each shard CSV of the sharded run: its shard, rows, the GPU's name (``device``) and the
``cuda:N`` it ran on (from the rows' ``repro``), and the wall time its sweeps reported ("Sweep
wall time" lines: rank 0's in the launcher's output, the others' in ``<csv>.log``).  Then
whether the shards together hold the one-process run's cases, each once, and the two runs'
wall times and their ratio.

    python -m validation shard-report --sharded A --single B [--rank0-log A.out]
        [--sharded-wall-s S --single-wall-s S]

Exit 0 when the case sets agree with no case twice, 1 when they do not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import case_columns
from validation.sweep_log import sweep_wall_s

_DEVICE = re.compile(r"--device (cuda:\d+|cuda|cpu)")


@dataclass(frozen=True)
class ShardFile:
    path: Path
    shard: str
    rows: int
    devices: tuple[str, ...]  # device names in its rows
    indices: tuple[str, ...]  # cuda:N of its rows
    keys: tuple[tuple[str, ...], ...]


def _keys(rows) -> list[tuple[str, ...]]:
    keys = []
    for row in rows:
        fields = case_columns(name for name, value in row.items() if value != "")
        keys.append((row.get("api", ""), *(f"{name}={row[name]}" for name in fields)))
    return keys


def read_shard_file(path: Path) -> ShardFile:
    rows = read_stored_rows(path).rows
    shards = sorted({f"{r.get('shard', '')}/{r.get('num_shards', '')}" for r in rows})
    devices = sorted({r.get("device", "") for r in rows})
    indices = sorted({m.group(1) for r in rows if (m := _DEVICE.search(r.get("repro", "")))})
    return ShardFile(
        path, ",".join(shards), len(rows), tuple(devices), tuple(indices), tuple(_keys(rows))
    )


def shard_wall_s(shard_file: ShardFile) -> float | None:
    """What the sweeps of a rank other than 0 reported, in the log beside its CSV."""
    log = Path(f"{shard_file.path}.log")
    if log.exists():
        return sweep_wall_s(log.read_text(encoding="utf-8", errors="replace"))
    return None


def render(
    files: Sequence[ShardFile],
    single_keys: Sequence[tuple[str, ...]],
    rank0_wall: float | None,
    walls: tuple[float | None, float | None],
) -> tuple[str, bool]:
    lines = [
        "| shard | CSV | rows | device | cuda:N | its sweeps' wall s |",
        "|---|---|---:|---|---|---:|",
    ]
    by_shard: dict[str, float] = {}
    for f in files:
        wall = shard_wall_s(f)
        if wall is not None:
            by_shard[f.shard] = by_shard.get(f.shard, 0.0) + wall
        text = "(rank 0: launcher output)" if wall is None else f"{wall:.1f}"
        lines.append(
            f"| {f.shard} | {f.path.name} | {f.rows} | {'; '.join(f.devices)} | "
            f"{'; '.join(f.indices)} | {text} |"
        )
    if rank0_wall is not None:
        zero = next((f.shard for f in files if f.shard.startswith("0/")), "0/?")
        by_shard[zero] = rank0_wall
    merged = Counter(key for f in files for key in f.keys)
    duplicates = sorted(key for key, n in merged.items() if n > 1)
    missing = sorted(set(single_keys) - set(merged))
    extra = sorted(set(merged) - set(single_keys))
    same = not duplicates and not missing and not extra
    lines += [
        "",
        f"sharded: {sum(merged.values())} rows, {len(merged)} cases, {len(duplicates)} in two "
        f"shards; one process: {len(single_keys)} rows; missing from the shards {len(missing)}, "
        f"only in the shards {len(extra)}: {'same cases' if same else 'CASE SETS DIFFER'}",
    ]
    if by_shard:
        totals = ", ".join(f"{shard} {wall:.1f} s" for shard, wall in sorted(by_shard.items()))
        values = list(by_shard.values())
        mean = sum(values) / len(values)
        ratio = f"; largest / mean {max(values) / mean:.3f}" if mean > 0 else ""
        lines.append(f"per-shard sweep wall time: {totals}{ratio}")
    sharded_s, single_s = walls
    if sharded_s and single_s:
        lines.append(
            f"wall time: sharded {sharded_s:.0f} s, one process {single_s:.0f} s, "
            f"one process / sharded {single_s / sharded_s:.2f}x"
        )
    for key in (duplicates + missing + extra)[:10]:
        lines.append(f"  {' '.join(key)}")
    return "\n".join(lines) + "\n", same


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sharded", type=Path, required=True, help="the shard CSVs' directory")
    parser.add_argument(
        "--single", type=Path, required=True, help="the one-process CSVs' directory"
    )
    parser.add_argument("--rank0-log", type=Path, help="the launcher's output (rank 0's lines)")
    parser.add_argument("--sharded-wall-s", type=float)
    parser.add_argument("--single-wall-s", type=float)
    args = parser.parse_args(argv)
    files = [read_shard_file(p) for p in sorted(args.sharded.glob("*.csv"))]
    single = [
        key for p in sorted(args.single.glob("*.csv")) for key in _keys(read_stored_rows(p).rows)
    ]
    if not files or not single:
        print("validation shard-report: error: no CSV in --sharded or --single", file=sys.stderr)
        return 2
    rank0 = None
    if args.rank0_log and args.rank0_log.exists():
        rank0 = sweep_wall_s(args.rank0_log.read_text(encoding="utf-8", errors="replace"))
    report, same = render(files, single, rank0, (args.sharded_wall_s, args.single_wall_s))
    print(report, end="")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
