"""How evenly --shard splits a measured sweep: max / mean shard total for N = 2, 4, 8.

Give it the CSVs of one sweep (files or directories; e.g. ``bench_all.py --preset full
--output-dir DIR`` on the H200).  Its cases are split as the harness would split them, by:

* ``predicted``  -- the roofline prediction (``fi_attn_bench.sweep.sharding``), as a run
                    without ``--cost-from`` does;
* ``predicted, wall only`` -- the same, balancing the predicted wall time alone (the split
                    before it balanced GPU time too; for comparison);
* ``cost-from``  -- ``--cost-from`` this same sweep: optimistic, the costs are the truth's own;
* ``cost-from half`` -- ``--cost-from`` a CSV holding every other case (the rest predicted);
* ``cost-from holdout`` -- ``--cost-from`` another sweep (``--holdout``), judged on this one;
* ``time_ms alone`` -- this sweep's bare call times as the only cost (not what the harness does);
* ``count``      -- case i to shard i mod N, in sweep order.

Each split is judged against two truths: ``wall``, the seconds a sweep spends on each case
(its measured time_ms and samples, plus the per-sample and per-case overheads the harness
pays: ``sharding.case_wall_s``), which is what a shard's run time is made of; and ``time_ms``,
the bare call times.  The harness's split balances both.  The
targets (largest / mean shard total, on both truths): ``predicted`` <= 1.10 and ``cost-from``
<= 1.05; each of those rows says PASS or FAIL, and the last line gives the verdict.

    python benchmarks/shard_balance.py DIR [--holdout DIR2] [--report balance.md]

Runs on the CPU; exit 0 when every target is met, 1 when one is missed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fi_attn_bench.cases.selection import case_key  # noqa: E402
from fi_attn_bench.cases.spec import BenchmarkSpec  # noqa: E402
from fi_attn_bench.errors import UsageError  # noqa: E402
from fi_attn_bench.results.reader import read_stored_rows  # noqa: E402
from fi_attn_bench.results.schema import STATUS_OK  # noqa: E402
from fi_attn_bench.suite import load_specs  # noqa: E402
from fi_attn_bench.sweep.sharding import (  # noqa: E402
    ShardItem,
    case_item,
    case_wall_s,
    imbalance,
    predicted_call_ms,
    reference_peaks,
    split_by_cost,
    split_by_count,
)
from fi_attn_bench.timing.options import TimingOptions  # noqa: E402

SHARD_COUNTS = (2, 4, 8)
GATES = {"predicted": 1.10, "cost-from": 1.05}  # largest shard / mean shard, both truths
ELEMENT_SIZE = 2  # float16 and bfloat16


@dataclass(frozen=True)
class MeasuredCase:
    """One ok row of the sweep: its case, call time and samples."""

    key: tuple[str, ...]
    spec: BenchmarkSpec
    case: Mapping[str, int]
    time_ms: float
    samples: int | None


@dataclass(frozen=True)
class BalanceRow:
    shards: int
    split: str
    wall: float  # max / mean of the shards' wall-time totals
    time_ms: float  # max / mean of the shards' time_ms totals
    gate: float | None
    # the same as wall, with the samples the loop takes noise aside (not judged): what is
    # left of the wall column's imbalance when the sample counts' noise is taken out
    wall_noise_free: float = 1.0


def _csv_paths(paths: Sequence[str]) -> list[Path]:
    found = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found += sorted(path.glob("*.csv"))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"no such file or directory: {text}")
    return found


def load_sweep(paths: Sequence[str], specs: Sequence[BenchmarkSpec]) -> list[MeasuredCase]:
    """The ok rows of the CSVs, in the suite's script order then row order; a case's first."""
    by_api = {spec.api: spec for spec in specs}
    rows: dict[str, list[MeasuredCase]] = {spec.api: [] for spec in specs}
    seen: set[tuple[str, ...]] = set()
    for path in _csv_paths(paths):
        for row in read_stored_rows(path).rows:
            spec = by_api.get(row.get("api", ""))
            if spec is None or row.get("status") != STATUS_OK:
                continue
            key = (spec.api, *case_key(row, spec.case_fields))
            if key in seen:
                continue
            seen.add(key)
            case = {name: int(float(row[name])) for name in spec.case_fields}
            samples = int(row["samples"]) if row.get("samples") else None
            rows[spec.api].append(MeasuredCase(key, spec, case, float(row["time_ms"]), samples))
    cases = [case for spec in specs for case in rows[spec.api]]
    if not cases:
        raise UsageError(f"no ok row of {', '.join(by_api)} in {' '.join(paths)}")
    return cases


def predicted_item(case: MeasuredCase, timing: TimingOptions) -> ShardItem:
    """The case as a run without --cost-from costs it."""
    spec, peaks = case.spec, reference_peaks()
    call = predicted_call_ms(spec.io_bytes(case.case, ELEMENT_SIZE), spec.flops(case.case), peaks)
    return case_item(case.key, call, timing)


def measured_item(case: MeasuredCase, timing: TimingOptions) -> ShardItem:
    """The case as --cost-from a CSV holding its row costs it."""
    return case_item(case.key, case.time_ms, timing, case.samples)


def split_items(
    cases: Sequence[MeasuredCase],
    holdout: Mapping[tuple[str, ...], MeasuredCase],
    timing: TimingOptions,
) -> dict[str, list[ShardItem]]:
    """Each cost split's items, as ``--cost-from`` / the prediction would give them."""
    predicted = [predicted_item(case, timing) for case in cases]
    own = [measured_item(case, timing) for case in cases]
    items = {
        "predicted": predicted,
        "predicted, wall only": [replace(item, gpu_us=0) for item in predicted],
        "cost-from": own,
        "cost-from half": [own[i] if i % 2 == 0 else predicted[i] for i in range(len(cases))],
    }
    if holdout:
        items["cost-from holdout"] = [
            measured_item(holdout[c.key], timing) if c.key in holdout else predicted[i]
            for i, c in enumerate(cases)
        ]
    # what balancing the bare call times alone would do
    items["time_ms alone"] = [ShardItem(item.key, item.gpu_us) for item in own]
    return items


def truths(cases: Sequence[MeasuredCase], timing: TimingOptions, use_samples: bool):
    """Each case's seconds: in the sweep (``wall``; the CSV's samples unless not
    ``use_samples``), of its call (``time_ms``), and in the sweep with the samples the loop
    takes noise aside (``wall_noise_free``)."""
    wall = [case_wall_s(c.time_ms, timing, c.samples if use_samples else None) for c in cases]
    noise_free = [case_wall_s(c.time_ms, timing) for c in cases]
    return {
        "wall": wall,
        "time_ms": [c.time_ms / 1e3 for c in cases],
        "wall_noise_free": noise_free,
    }


def balance_rows(
    cases: Sequence[MeasuredCase],
    items: Mapping[str, Sequence[ShardItem]],
    truth: Mapping[str, Sequence[float]],
    shard_counts: Sequence[int] = SHARD_COUNTS,
) -> list[BalanceRow]:
    """max / mean shard total of every split and shard count, against both truths."""
    rows = []
    for count in shard_counts:
        splits = {name: split_by_cost(values, count) for name, values in items.items()}
        splits["count"] = split_by_count([ShardItem(case.key, 0) for case in cases], count)
        for name, split in splits.items():
            ratios = {
                which: imbalance([sum(values[i] for i in shard) for shard in split.shards])
                for which, values in truth.items()
            }
            rows.append(BalanceRow(count, name, gate=GATES.get(name), **ratios))
    return rows


def render(rows: Sequence[BalanceRow], cases: Sequence[MeasuredCase], note: str) -> str:
    """The report: one table, ratios of the largest shard's total to the mean shard total,
    then the verdict on the targets."""
    apis = sorted({case.key[0] for case in cases})
    lines = [
        f"# Shard balance: {len(cases)} cases ({', '.join(apis)})",
        "",
        note,
        "",
        "Largest shard's total / mean shard total (1.00 = even), against each truth:",
        "",
        "| N | split | wall | time_ms | target (both truths) | wall, samples noise-free |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for row in rows:
        gate = "" if row.gate is None else f"<= {row.gate:.2f} {_verdict(row)}"
        lines.append(
            f"| {row.shards} | {row.split} | {row.wall:.3f} | {row.time_ms:.3f} | {gate} "
            f"| {row.wall_noise_free:.3f} |"
        )
    return "\n".join([*lines, "", verdict_line(rows)]) + "\n"


def _met(row: BalanceRow) -> bool:
    return max(row.wall, row.time_ms) <= row.gate


def _verdict(row: BalanceRow) -> str:
    return "PASS" if _met(row) else "FAIL"


def missed(rows: Sequence[BalanceRow]) -> list[BalanceRow]:
    """The gated rows whose split misses its target on either truth."""
    return [row for row in rows if row.gate is not None and not _met(row)]


def verdict_line(rows: Sequence[BalanceRow]) -> str:
    gated = [row for row in rows if row.gate is not None]
    failed = missed(rows)
    if not failed:
        return f"Targets: PASS ({len(gated)} of {len(gated)} splits within their target)."
    names = ", ".join(f"N={row.shards} {row.split}" for row in failed)
    return f"Targets: FAIL ({len(failed)} of {len(gated)} splits miss theirs: {names})."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="the sweep's CSVs or directories of them")
    parser.add_argument("--holdout", nargs="+", default=[], help="another sweep of the cases")
    parser.add_argument("--shards", nargs="+", type=int, default=list(SHARD_COUNTS))
    parser.add_argument(
        "--min-time-ms",
        type=float,
        default=TimingOptions.min_time_ms,
        help="the timing the costs model (default: the harness's)",
    )
    parser.add_argument(
        "--model-samples",
        action="store_true",
        help="wall truth from the modelled sample counts, not the CSV's samples (for a "
        "sweep measured with other timing options than the ones modelled)",
    )
    parser.add_argument("--report", help="also write the table to this Markdown file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if any(count < 1 for count in args.shards):
            raise UsageError("--shards: each N must be >= 1")
        specs = load_specs()
        cases = load_sweep(args.csv, specs)
        holdout = {c.key: c for c in load_sweep(args.holdout, specs)} if args.holdout else {}
    except (UsageError, OSError, ValueError) as exc:
        print(f"shard_balance.py: error: {exc}", file=sys.stderr)
        return 2
    timing = replace(TimingOptions(), min_time_ms=args.min_time_ms)
    truth = truths(cases, timing, use_samples=not args.model_samples)
    rows = balance_rows(cases, split_items(cases, holdout, timing), truth, args.shards)
    total = sum(truth["wall"])
    note = (
        f"wall truth: {total:.0f} s for the sweep ("
        + ("modelled samples" if args.model_samples else "the CSV's samples")
        + f"); holdout: {'given, ' + str(len(holdout)) + ' cases' if holdout else 'none'}."
    )
    report = render(rows, cases, note)
    print(report, end="")
    if args.report:
        Path(args.report).write_text(report, encoding="utf-8")
    return 1 if missed(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
