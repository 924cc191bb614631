"""The imbalance table (and plot) of serving sweeps: each varied case against its uniform twin.

    python -m validation imbalance OUT_DIR results/*.csv

Prints one line per varied-length row (api, workload, requests, KV mean / max, time, twin time,
imbalance) and writes ``OUT_DIR/imbalance.md`` and, with matplotlib, ``OUT_DIR/imbalance.png``.
Rows without ``imbalance_pct`` (uniform cases, runs without ``--imbalance``) are left out.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import STATUS_OK

SHORT_API = {
    "BatchDecodeWithPagedKVCacheWrapper": "decode",
    "BatchPrefillWithPagedKVCacheWrapper": "paged prefill",
    "BatchPrefillWithRaggedKVCacheWrapper": "ragged prefill",
    "BatchMLAPagedAttentionWrapper": "mla",
}


@dataclass(frozen=True)
class ImbalanceRow:
    """One varied case measured with its uniform twin."""

    api: str
    workload: str
    num_requests: int
    kv_len_mean: float
    kv_len_max: int
    time_ms: float
    uniform_twin_ms: float
    imbalance_pct: float


def imbalance_rows(paths: Sequence[str]) -> list[ImbalanceRow]:
    """The ok rows of these CSVs that carry an imbalance, in file order."""
    rows = []
    for path in paths:
        records = list(read_stored_rows(path).rows)
        for r in records:
            if r.get("status") != STATUS_OK or not r.get("imbalance_pct"):
                continue
            rows.append(
                ImbalanceRow(
                    api=SHORT_API.get(r["api"], r["api"]),
                    workload=r["workload"],
                    num_requests=int(r["num_requests"]),
                    kv_len_mean=float(r["kv_len_mean"]),
                    kv_len_max=int(r["kv_len_max"]),
                    time_ms=float(r["time_ms"]),
                    uniform_twin_ms=float(r["uniform_twin_ms"]),
                    imbalance_pct=float(r["imbalance_pct"]),
                )
            )
    return rows


def table_lines(rows: Sequence[ImbalanceRow]) -> list[str]:
    """A Markdown table, one line per row (times in ms, imbalance in %)."""
    lines = [
        "| api | workload | requests | KV mean | KV max | time (ms) | uniform twin (ms) | imbalance |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.api} | `{r.workload}` | {r.num_requests} | {r.kv_len_mean:.0f} | "
            f"{r.kv_len_max} | {r.time_ms:.4f} | {r.uniform_twin_ms:.4f} | {r.imbalance_pct:+.1f}% |"
        )
    return lines


def plot(rows: Sequence[ImbalanceRow], path: str) -> bool:
    """Horizontal bars of imbalance_pct per case, grouped by API; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{r.api}: {r.workload[:48]}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(rows) + 1.5))
    ax.barh(range(len(rows)), [r.imbalance_pct for r in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("imbalance_pct: time / uniform twin time - 1 (%)")
    ax.set_title("Serving-shaped batches against their uniform twins")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("csv", nargs="+")
    args = parser.parse_args(argv)
    rows = imbalance_rows(args.csv)
    if not rows:
        print("no row carries imbalance_pct (run the scripts with --imbalance)", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    lines = table_lines(rows)
    with open(os.path.join(args.out_dir, "imbalance.md"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if plot(rows, os.path.join(args.out_dir, "imbalance.png")):
        print(f"plot: {os.path.join(args.out_dir, 'imbalance.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
