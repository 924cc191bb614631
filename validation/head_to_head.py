"""Head to head on a GPU: interleaved A/A, sensitivity, cost, fa2 vs fa3.

Runs the four bench scripts' command lines (the public CLI, ``--impl``) over a preset and
reads their CSVs; prints a short table per part and writes CSVs, ``walls.json``, a
``<part>.md`` table and (backends) ``backends_<api>.svg`` forest plots into DIR.

    python -m validation head-to-head DIR --part aa        # (a) A/A + (c) cost, ~4 min
    python -m validation head-to-head DIR --part aa-one    # (a) one instance against itself, ~2 min
    python -m validation head-to-head DIR --part spin      # (b) 2 % spin against itself
    python -m validation head-to-head DIR --part backends  # (d) flashinfer:fa2 vs :fa3
    python -m validation head-to-head DIR --part report    # tables again from DIR, no GPU

``--sweep-args '--noise-target 0.5'`` passes options on to every script.

(a) ``--impl a=flashinfer --impl b=flashinfer``: the paired ratio b/a of every case whose
    time is >= 20 us, its spread and whether each interval holds 1.00; ``aa-one``: the same
    with one instance (plugin ``one_instance``) as a and b, no second wrapper or buffers.
(b) ``--impl base=flashinfer --impl spin=validation.spin_impls:spin_auto``: the same
    FlashInfer run() followed by a GPU spin calibrated (in the plugin's plan, against run()
    alone, interleaved) to make a call ``SPIN_FRACTION`` slower; the share of cases >= 50 us
    called slower, and the cases that were not. ``--spin mma`` keeps every SM doing fp16
    tensor-core work, ``--spin busy`` FP32 work (both need Triton), ``--spin sleep`` is
    torch.cuda._sleep, which idles the GPU at low power; ``--spin auto`` (default) takes mma,
    or sleep for a case too short for mma's fixed cost.
(c) the wall time of the A/A sweep against a one-impl sweep of the same cases.
(d) ``--impl flashinfer:fa2 --impl flashinfer:fa3`` (``--backends``) per script.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from validation.spin_impls import SPIN_FRACTION, SPIN_PLUGINS
from validation.sweep_log import SWEEP_WALL

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = "validation.spin_impls"  # the sweeps' --impl targets are PLUGINS:FACTORY

SCRIPTS = {
    "decode": "bench_batch_decode.py",
    "paged": "bench_batch_prefill_paged.py",
    "ragged": "bench_batch_prefill_ragged.py",
    "mla": "bench_batch_mla.py",
}
BACKEND_SCRIPTS = "paged,ragged,mla"
AA_MIN_MS = 0.020
SPIN_MIN_MS = 0.050
AA_BAND = 0.005  # the A/A target: every ratio within +-0.5 %
AA_ONE = "aaone"  # the CSV prefix of the one-instance A/A
MARGINS_PCT = (0.0, 0.1, 0.25, 0.5)  # --same-within values the reports recount verdicts at


# ---------------------------------------------------------------- running the scripts


def _sweep(out: Path, tag: str, script: str, impls: Sequence[str], extra: Sequence[str]) -> float:
    """One script's sweep into out/<tag>_<script>.csv, its output passed through; records its
    process wall time and the sweep's own (``Sweep wall time``, no start-up or JIT import) in
    walls.json; returns the process wall seconds."""
    csv_path = out / f"{tag}_{Path(script).stem}.csv"
    argv = [sys.executable, script, "--output", str(csv_path), *extra]
    for impl in impls:
        argv += ["--impl", impl]
    print("$", " ".join(argv[1:]), flush=True)
    started = time.monotonic()
    sweep_s = None
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            found = SWEEP_WALL.search(line)
            if found:
                sweep_s = float(found.group(1))
    wall = time.monotonic() - started
    print(f"  exit {process.returncode}, {wall:.1f} s", flush=True)
    walls = _walls(out)
    entry = {"wall_s": wall, "sweep_s": sweep_s, "exit": process.returncode}
    walls[f"{tag}_{Path(script).stem}"] = entry
    (out / "walls.json").write_text(json.dumps(walls, indent=1))
    return wall


def _walls(out: Path) -> dict:
    path = out / "walls.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _pairs(path: Path, base: str) -> list[tuple[dict, dict]]:
    """(baseline row, other row) per case and other impl, both ok."""
    rows = _rows(path)
    case_fields = _case_fields(rows[0]) if rows else []

    def key(row):
        return tuple(row[f] for f in case_fields)

    bases = {key(r): r for r in rows if r["impl"] == base and r["status"] == "ok"}
    return [
        (bases[key(r)], r)
        for r in rows
        if r["impl"] != base and r["status"] == "ok" and key(r) in bases and r["paired_ratio"]
    ]


def _interval(row) -> tuple[float, float] | None:
    if not row["paired_ratio_lo"]:
        return None
    return float(row["paired_ratio_lo"]), float(row["paired_ratio_hi"])


# ---------------------------------------------------------------- the parts


def part_aa(out: Path, names: Sequence[str], extra: Sequence[str]) -> None:
    for name in names:
        _sweep(out, "single", SCRIPTS[name], ["flashinfer"], extra)
        _sweep(out, "aa", SCRIPTS[name], ["a=flashinfer", "b=flashinfer"], [*extra, *_samples(out)])


def part_aa_one(out: Path, names: Sequence[str], extra: Sequence[str]) -> None:
    """A/A of one instance against itself: what is left is the measurement's own error."""
    one = f"{PLUGINS}:one_instance"
    for name in names:
        _sweep(out, AA_ONE, SCRIPTS[name], [f"a={one}", f"b={one}"], [*extra, *_samples(out)])


def _samples(out: Path) -> list[str]:
    """The sweep options that keep each case's round medians (read back by the reports)."""
    return ["--samples-dir", str(out / "samples")]


def part_spin(out: Path, names: Sequence[str], extra: Sequence[str], kind: str = "auto") -> None:
    os.environ["H2H_SPIN_LOG"] = str(out / "spin_reached.jsonl")
    factory = SPIN_PLUGINS[kind]
    for name in names:
        plugin = f"spin={PLUGINS}:{factory}"
        _sweep(out, factory, SCRIPTS[name], ["base=flashinfer", plugin], [*extra, *_samples(out)])


def part_backends(out: Path, names, extra, backends: Sequence[str]) -> None:
    for name in names:
        _sweep(out, "backends", SCRIPTS[name], [f"flashinfer:{b}" for b in backends], extra)


def report_aa(out: Path, names) -> list[str]:
    lines = [
        "## (a) Interleaved A/A, cases >= 20 us",
        "",
        "Next to the cross-process A/A (H200, harness 0.6.0, cases >= 50 us): two "
        "sweeps on one machine |d time_ms| median 0.11 %, max 1.4 %; on another H200 median "
        "0.8 %, max 3.8 %. Target here: every ratio within +-0.5 %, every interval holding 1. "
        "Two instances: a=flashinfer b=flashinfer (own wrapper, workspace, output each); one "
        "instance: the same callable twice (--part aa-one).",
        "",
        "| script | A/A of | cases | median abs(r-1) % | max abs(r-1) % | within +-0.5 % | interval holds 1 | slower | faster |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    outside, margins = [], []
    for tag, instances in (("aa", "two instances"), (AA_ONE, "one instance")):
        every = []
        for name in names:
            pairs = _long_pairs(out, tag, name, "a", AA_MIN_MS)
            if not pairs:
                continue
            every += pairs
            lines.append(f"| {name} | {instances} | " + _aa_cells(pairs))
            rounds = _read_round_medians(
                out / "samples" / f"{tag}_{Path(SCRIPTS[name]).stem}.samples.jsonl.gz"
            )
            outside += [
                f"{name} ({instances}) {_case_label(o)}: {_ratio_text(o)}{_order_split(rounds, o)}"
                for _, o in pairs
                if abs(float(o["paired_ratio"]) - 1) > AA_BAND
            ]
        if every:
            margins.append(_margin_line(f"A/A of {instances}: called faster or slower", every))
    if outside:
        lines += ["", "Outside +-0.5 %: " + "; ".join(outside)]
    return [*lines, "", *margins] if margins else lines


def _margin_line(label: str, pairs, verdicts=("faster", "slower")) -> str:
    """How many of ``pairs`` get one of ``verdicts`` at each of MARGINS_PCT, recounted from
    their intervals with the harness's own rule (the CSV's verdict used the sweep's margin)."""
    from fi_attn_bench.timing.paired import PairedRatio

    def verdict(row: dict, margin: float) -> str:
        ratio = PairedRatio(float(row["paired_ratio"]), 0, _interval(row), margin)
        return ratio.verdict

    counts = [sum(verdict(o, m) in verdicts for _, o in pairs) for m in MARGINS_PCT]
    return (
        f"{label} at --same-within {' / '.join(f'{m:g}' for m in MARGINS_PCT)} %: "
        f"{' / '.join(map(str, counts))} of {len(pairs)}"
    )


def _aa_cells(pairs) -> str:
    dev = [abs(float(o["paired_ratio"]) - 1) * 100 for _, o in pairs]
    holds = sum(1 for _, o in pairs if (i := _interval(o)) and i[0] <= 1 <= i[1])
    within = sum(d <= AA_BAND * 100 for d in dev)
    verdicts = [o["paired_verdict"] for _, o in pairs]
    return (
        f"{len(pairs)} | {statistics.median(dev):.2f} | {max(dev):.2f} | {within}/{len(pairs)} | "
        f"{holds}/{len(pairs)} | {verdicts.count('slower')} | {verdicts.count('faster')} |"
    )


def _read_round_medians(path: Path) -> dict[tuple, list[float]]:
    """case_key -> the case's round medians, from a sweep's --samples-dir file."""
    if not path.exists():
        return {}
    from fi_attn_bench.summarizer.rank_test import case_key
    from fi_attn_bench.sweep.sample_writer import read_samples

    return {
        case_key(e["api"], e["case"], e["impl"]): e["round_medians_ms"]
        for e in read_samples(str(path))
        if "round_medians_ms" in e
    }


def _order_split(rounds: dict[tuple, list[float]], row: dict) -> str:
    """The median A/A round ratio b/a over the rounds run A B and over those run B A: apart,
    they show the order effect that each pair of rounds cancels in the paired ratio."""
    from fi_attn_bench.summarizer.rank_test import case_key

    cells = {f: row[f] for f in _case_fields(row)}
    a, b = (rounds.get(case_key(row["api"], cells, impl)) for impl in ("a", "b"))
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return ""
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    ab, ba = (statistics.median(ratios[start::2]) for start in (0, 1))
    return f" (rounds A B {ab:.4f}, B A {ba:.4f})"


def _long_pairs(out: Path, part: str, name: str, baseline: str, min_ms: float):
    """(baseline row, other row) of a part's CSV for the cases whose baseline time >= min_ms."""
    path = out / f"{part}_{Path(SCRIPTS[name]).stem}.csv"
    return [(b, o) for b, o in _pairs(path, baseline) if float(b["time_ms"]) >= min_ms]


def report_spin(out: Path, names) -> list[str]:
    lines = []
    for kind, tag in SPIN_PLUGINS.items():
        rows, misses, every = [], [], []
        for name in names:
            pairs = _long_pairs(out, tag, name, "base", SPIN_MIN_MS)
            if not pairs:
                continue
            every += pairs
            ratios = [float(o["paired_ratio"]) for _, o in pairs]
            slower = sum(o["paired_verdict"] == "slower" for _, o in pairs)
            misses += [
                f"{name} {_case_label(o)}: {_ratio_text(o)}"
                for _, o in pairs
                if o["paired_verdict"] != "slower"
            ]
            rows.append(
                f"| {name} | {len(pairs)} | {slower}/{len(pairs)} ({slower / len(pairs):.0%}) | "
                f"{statistics.median(ratios):.4f} | {min(ratios):.4f} | {max(ratios):.4f} |"
            )
        if not rows:
            continue
        lines += [
            f"## (b) Sensitivity: a {SPIN_FRACTION:.0%} {kind} spin against itself, cases >= 50 us",
            "",
            "| script | cases | called slower | median ratio | min ratio | max ratio |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
        if misses:
            lines += ["", "Not called slower: " + "; ".join(misses)]
        lines += ["", _margin_line("Called slower", every, ("slower",))]
        entries = _spin_entries(out, kind)
        if entries:
            reached = [e["reached"] for e in entries]
            used = collections.Counter(e.get("used", kind) for e in entries)
            lines += [
                "",
                f"Slowdown the spin added (plugin's plan, interleaved bursts, warm L2), cases >= "
                f"50 us: median {statistics.median(reached):.2%}, range {min(reached):.2%} to "
                f"{max(reached):.2%}; spin used: "
                + ", ".join(f"{name} {count}" for name, count in sorted(used.items())),
            ]
        lines.append("")
    return lines


def _case_fields(row: dict) -> list[str]:
    """The case columns of a harness row: after schema_version and api, up to status, less impl."""
    fields = [c for c in row if c != "impl"]
    return fields[2 : fields.index("status")] if "status" in fields else []


def _case_label(row: dict) -> str:
    return ",".join(f"{f}={row[f]}" for f in _case_fields(row) if row[f])


def _ratio_text(row: dict) -> str:
    interval = _interval(row)
    span = f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else ""
    return f"{float(row['paired_ratio']):.4f}{span}"


def _spin_entries(out: Path, kind: str) -> list[dict]:
    """The spin log's entries of ``kind`` for cases >= SPIN_MIN_MS (the first logs, of the
    sleep spin, have no ``spin`` key)."""
    path = out / "spin_reached.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in entries if e["plain_ms"] >= SPIN_MIN_MS and e.get("spin", "sleep") == kind]


def report_cost(out: Path, names) -> list[str]:
    """Process wall time (start-up and imports included) and the sweeps' own wall time."""
    walls = _walls(out)
    lines = [
        "## (c) Cost: wall time of two interleaved impls against one",
        "",
        "| script | one impl s | two impls (A/A) s | ratio | sweep only: one s | two s | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = [0.0, 0.0, 0.0, 0.0]
    for name in names:
        stem = Path(SCRIPTS[name]).stem
        one, two = walls.get(f"single_{stem}"), walls.get(f"aa_{stem}")
        if not (one and two):
            continue
        cells = [one["wall_s"], two["wall_s"], one.get("sweep_s") or 0.0, two.get("sweep_s") or 0.0]
        total = [t + c for t, c in zip(total, cells, strict=True)]
        lines.append(_cost_row(name, cells))
    if total[0]:
        lines.append(_cost_row("all", total))
    return lines


def _cost_row(name: str, cells: Sequence[float]) -> str:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}" if a > 0 and b > 0 else "n/a"

    one, two, sweep_one, sweep_two = cells
    return (
        f"| {name} | {one:.1f} | {two:.1f} | {ratio(one, two)} | {sweep_one:.1f} | "
        f"{sweep_two:.1f} | {ratio(sweep_one, sweep_two)} |"
    )


def report_backends(out: Path, names) -> list[str]:
    """Per script, one line per implementation against the first (the baseline), and a
    forest plot with a row per case and implementation."""
    lines = ["## (d) FlashInfer backends head to head", ""]
    for name in names:
        path = out / f"backends_{Path(SCRIPTS[name]).stem}.csv"
        rows = _rows(path)
        if not rows:
            continue
        base = rows[0]["impl"]
        pairs = _pairs(path, base)
        failed = sorted({(r["impl"], r["error"][:80]) for r in rows if r["status"] != "ok"})
        for impl in dict.fromkeys(o["impl"] for _, o in pairs):
            lines.append(
                f"- {name}: {_impl_line(impl, base, [o for _, o in pairs if o['impl'] == impl])}"
            )
        if pairs:
            plot = forest_svg(rows[0]["api"], pairs, base, out)
            lines.append(f"  ![{name}]({plot.name})")
        for impl, error in failed[:3]:
            lines.append(f"- {name}: {impl} failed: {error}")
    return lines


def _impl_line(impl: str, base: str, others: Sequence[dict]) -> str:
    """One implementation's paired ratios against the baseline: geomean and verdict counts."""
    verdicts = [o["paired_verdict"] for o in others]
    geomean = statistics.geometric_mean(float(o["paired_ratio"]) for o in others)
    cases = f"{len(others)} case{'s' * (len(others) != 1)}"
    return (
        f"{impl} / {base} over {cases}: geomean {geomean:.3f}, faster "
        f"{verdicts.count('faster')}, slower {verdicts.count('slower')}, same "
        f"{verdicts.count('same')}"
    )


def forest_svg(api: str, pairs, base: str, out: Path) -> Path:
    """One row per case: the paired ratio and its 95 % interval around a line at 1.00."""
    width, row_h, left, right = 760, 18, 330, 40
    ratios = [float(o["paired_ratio"]) for _, o in pairs]
    lows = [(_interval(o) or (r, r))[0] for (_, o), r in zip(pairs, ratios, strict=True)]
    highs = [(_interval(o) or (r, r))[1] for (_, o), r in zip(pairs, ratios, strict=True)]
    low, high = min(min(lows), 0.95), max(max(highs), 1.05)
    height = row_h * (len(pairs) + 3)

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * (width - left - right)

    others = " and ".join(dict.fromkeys(o["impl"] for _, o in pairs))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="monospace" font-size="11">',
        f'<text x="8" y="14">{api}: {others} / {base} (time ratio, 95 % interval; &lt;1 faster)</text>',
        f'<line x1="{x(1):.1f}" y1="{row_h}" x2="{x(1):.1f}" y2="{height - row_h}" stroke="#888"/>',
    ]
    colors = {"faster": "#1a7f37", "slower": "#cf222e", "same": "#57606a"}
    fields = [f for f in pairs[0][0] if f not in ("schema_version", "api")]
    case_fields = fields[: fields.index("status")]
    for index, ((b, o), r, lo, hi) in enumerate(zip(pairs, ratios, lows, highs, strict=True)):
        y = row_h * (index + 2)
        label = f"{o['impl']}: " + ",".join(f"{f}={b[f]}" for f in case_fields if f != "impl")
        color = colors.get(o["paired_verdict"], "#000")
        parts += [
            f'<text x="8" y="{y + 4}">{label[:52]}</text>',
            f'<line x1="{x(lo):.1f}" y1="{y}" x2="{x(hi):.1f}" y2="{y}" stroke="{color}"/>',
            f'<circle cx="{x(r):.1f}" cy="{y}" r="3" fill="{color}"/>',
        ]
    for tick in (low, 1.0, high):
        parts.append(f'<text x="{x(tick) - 14:.1f}" y="{height - 4}">{tick:.2f}</text>')
    parts.append("</svg>")
    path = out / f"backends_{api}.svg"
    path.write_text("\n".join(parts))
    return path


def flashinfer_missing() -> str | None:
    """Why FlashInfer cannot be imported in this interpreter (None: it can)."""
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import means no case can run
        return f"{type(exc).__name__}: {exc}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory for CSVs, walls.json, tables, plots")
    parser.add_argument(
        "--part", choices=("aa", "aa-one", "spin", "backends", "report"), required=True
    )
    parser.add_argument(
        "--scripts",
        help="some of decode,paged,ragged,mla (default: all; for --part backends paged,ragged,mla: "
        "decode's wrapper has no fa3)",
    )
    parser.add_argument("--backends", default="fa2,fa3", help="--part backends: the impls")
    parser.add_argument("--preset", default="default")
    parser.add_argument(
        "--sweep-args",
        default="",
        help="more options for every script, one string (e.g. '--noise-target 0.5')",
    )
    parser.add_argument(
        "--spin",
        choices=tuple(SPIN_PLUGINS),
        default="auto",
        help="--part spin: mma (fp16 tensor-core work on every SM), busy (FP32 work on every "
        "SM), sleep (torch.cuda._sleep) or auto (default: mma, or sleep where a case is too "
        "short for mma's fixed cost)",
    )
    args = parser.parse_args(argv)
    chosen = args.scripts or (BACKEND_SCRIPTS if args.part == "backends" else ",".join(SCRIPTS))
    names = [n for n in chosen.split(",") if n]
    unknown = sorted(set(names) - set(SCRIPTS))
    if unknown:
        parser.error(f"unknown --scripts {', '.join(unknown)}; choose from {', '.join(SCRIPTS)}")
    try:
        sweep_args = shlex.split(args.sweep_args)
    except ValueError as exc:
        parser.error(f"--sweep-args {args.sweep_args!r}: {exc}")
    missing = flashinfer_missing() if args.part != "report" else None
    if missing:  # every case would fail after minutes of preparing them
        print(
            f"error: --part {args.part} measures FlashInfer, which cannot be imported here "
            f"({missing}); install it on a GPU machine, or use --part report",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    extra = ["--preset", args.preset, *sweep_args]
    if args.part == "aa":
        part_aa(args.out, names, extra)
    elif args.part == "aa-one":
        part_aa_one(args.out, names, extra)
    elif args.part == "spin":
        part_spin(args.out, names, extra, args.spin)
    elif args.part == "backends":
        part_backends(args.out, names, extra, args.backends.split(","))
    lines = [
        *report_aa(args.out, names),
        "",
        *report_spin(args.out, names),
        "",
        *report_cost(args.out, names),
        "",
        *report_backends(args.out, names),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / f"{args.part}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
