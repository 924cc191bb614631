"""Do the integrity checks hold on a GPU?  The GPU-only exploits, false flags over the default
preset, and what the checks cost.

    python -m validation integrity OUT [--dtypes float16 bfloat16] [--default-sweeps 6]
    python -m validation integrity OUT --device cpu --preset cpu   (the same on the CPU)

1. ``tests/test_integrity_gpu.py`` (the exploits that need a GPU, the honest plugin under
   every GPU timer) under pytest;
2. per dtype: the preset of the four scripts ``--default-sweeps`` times, the checks on
   (default), off (``--no-integrity``) and strict (``--judge``) in the order
   on/off/judge/judge/off/on so drift and heat fall on each, then the torch reference
   (``--impl torch``) of every script and ``examples/`` plugins, default and ``--judge``;
3. ``OUT/integrity.md``: every row whose ``integrity`` is neither ``pass`` nor ``pass_weak``
   (a false flag: these are honest implementations), and the cost of the default checks and
   of ``--judge``: (mean sweep wall with them - mean with none) as % of the mean with them.

Each step has its own time limit and its CSVs and log under ``OUT``, so a call cut short keeps
what finished.  Exit 0 when every step ran, no row was flagged and the exploits were caught.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import INTEGRITY_PASS, INTEGRITY_PASS_WEAK
from validation.jit import gpu_available, warm_jit
from validation.running import SCRIPTS, python, run_logged, tail
from validation.sweep_log import sweep_wall_s

PLUGINS = {"bench_batch_decode.py": ("examples/sdpa_decode_plugin.py:make",)}
MODES = ("on", "off", "judge", "judge", "off", "on")
"""The order of the preset sweeps (repeated): each mode meets early and late, hot and cold."""
MODE_ARGS = {"on": (), "off": ("--no-integrity",), "judge": ("--judge",)}


@dataclass(frozen=True)
class Sweep:
    """One step's outcome: its label, exit status, process and sweep wall seconds, and rows."""

    label: str
    exit_code: int
    wall_s: float
    sweep_s: float
    rows: tuple[dict[str, str], ...]
    checks: bool = True  # False: run with --no-integrity (its rows say "off")
    default_preset: bool = True  # False: an --impl sweep of one script
    judge: bool = False  # run with --judge

    @property
    def mode(self) -> str:
        return "judge" if self.judge else "on" if self.checks else "off"

    @property
    def flagged(self) -> tuple[dict[str, str], ...]:
        """Rows an honest implementation should not have: any outcome but pass (pass_weak:
        the weaker set of a batch timer, passed)."""
        if not self.checks:
            return ()
        passed = (INTEGRITY_PASS, INTEGRITY_PASS_WEAK)
        return tuple(row for row in self.rows if row.get("integrity") not in passed)


def csv_rows(folder: Path) -> tuple[dict[str, str], ...]:
    rows: list[dict[str, str]] = []
    for path in sorted(folder.glob("*.csv")):
        rows.extend(read_stored_rows(path).rows)
    return tuple(rows)


def run_sweep(
    label: str,
    argv: Sequence[str],
    folder: Path,
    timeout_s: float,
    checks: bool = True,
    default_preset: bool = True,
    judge: bool = False,
) -> Sweep:
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "run.log"
    done = run_logged(argv, log, timeout_s)
    sweep_s = sweep_wall_s(log.read_text(errors="replace"))
    print(f"{label}: exit {done.exit_code}, {done.wall_s:.1f} s wall, sweeps {sweep_s:.1f} s")
    if done.exit_code not in (0, 1):
        print(tail(log, 5))
    rows = csv_rows(folder)
    return Sweep(label, done.exit_code, done.wall_s, sweep_s, rows, checks, default_preset, judge)


@dataclass(frozen=True)
class Target:
    """Where the sweeps run: the preset, and extra options (``--device cpu``)."""

    preset: str = "default"
    extra: tuple[str, ...] = ()


def default_sweep(
    out: Path, dtype: str, mode: str, index: int, timeout_s: float, target: Target = Target()
) -> Sweep:
    label = f"{dtype} {target.preset}, checks {mode} #{index}"
    folder = out / f"{dtype}_{mode}_{index}"
    argv = python("bench_all.py", "--preset", target.preset, "--dtype", dtype, *target.extra)
    argv += ["--output-dir", str(folder), *MODE_ARGS[mode]]
    return run_sweep(label, argv, folder, timeout_s, checks=mode != "off", judge=mode == "judge")


def impl_sweeps(out: Path, dtype: str, timeout_s: float, target: Target = Target()) -> list[Sweep]:
    """The torch reference of every script, and each script's example plugins, checks on and
    under --judge."""
    sweeps = []
    for script in SCRIPTS:
        for impl in ("torch", *PLUGINS.get(script, ())):
            for mode in ("on", "judge"):
                name = impl.rpartition("/")[2].partition(":")[0].removesuffix(".py")
                folder = out / f"{dtype}_{Path(script).stem}_{name}_{mode}"
                argv = python(script, "--preset", target.preset, "--dtype", dtype, "--impl", impl)
                argv += [*target.extra, "--output", str(folder / "rows.csv"), *MODE_ARGS[mode]]
                label = f"{dtype} {script} --impl {impl} ({mode})"
                sweeps.append(
                    run_sweep(
                        label, argv, folder, timeout_s, default_preset=False, judge=mode == "judge"
                    )
                )
    return sweeps


def exploit_tests(out: Path, timeout_s: float) -> int:
    log = out / "exploits.log"
    argv = python("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_integrity_gpu.py")
    done = run_logged(argv, log, timeout_s)
    print(f"GPU exploits: pytest exit {done.exit_code}, {done.wall_s:.0f} s\n{tail(log, 3)}")
    return done.exit_code


def cost_line(sweeps: Sequence[Sweep]) -> str:
    """The default checks' and --judge's cost: the extra mean sweep wall time over the sweeps
    without checks, as % of the mean sweep wall time with them."""
    defaults = [sweep for sweep in sweeps if sweep.default_preset]
    by_mode = {
        mode: [sweep.sweep_s for sweep in defaults if sweep.mode == mode]
        for mode in ("on", "off", "judge")
    }
    if not by_mode["on"] or not by_mode["off"]:
        return "cost: needs sweeps with the checks on and off"
    off = statistics.mean(by_mode["off"])
    parts = []
    for mode, name in (("on", "default checks"), ("judge", "--judge")):
        if by_mode[mode]:
            with_them = statistics.mean(by_mode[mode])
            parts.append(
                f"{name} {', '.join(f'{s:.1f}' for s in by_mode[mode])} s: "
                f"{(with_them - off) / with_them:+.1%} of sweep wall "
                f"({with_them / off - 1:+.1%} over off)"
            )
    return (
        f"cost: sweep wall with no checks {', '.join(f'{s:.1f}' for s in by_mode['off'])} s; "
        + "; ".join(parts)
    )


def report(sweeps: Sequence[Sweep], exploits_exit: int | None) -> str:
    lines = [
        "# Integrity checks on a GPU",
        "",
        "| step | exit | rows | ok | failed | flagged (integrity not pass) | process s | sweep s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sweep in sweeps:
        ok = sum(row.get("status") == "ok" for row in sweep.rows)
        failed = sum(row.get("status") == "failed" for row in sweep.rows)
        flagged = len(sweep.flagged)
        lines.append(
            f"| {sweep.label} | {sweep.exit_code} | {len(sweep.rows)} | {ok} | {failed} | "
            f"{flagged} | {sweep.wall_s:.1f} | {sweep.sweep_s:.1f} |"
        )
    lines += ["", cost_line(sweeps), ""]
    if exploits_exit is not None:
        lines.append(f"GPU exploits (tests/test_integrity_gpu.py): pytest exit {exploits_exit}")
    flagged = [(sweep.label, row) for sweep in sweeps for row in sweep.flagged]
    lines += ["", f"## Flagged rows: {len(flagged)}", ""]
    lines += [
        f"- {label}: {row.get('api')} {row.get('case', '')} integrity={row.get('integrity')} "
        f"status={row.get('status')} {row.get('notes', '')[:200]}"
        for label, row in flagged
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m validation integrity", description=__doc__.partition("\n\n")[0]
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument(
        "--default-sweeps",
        type=int,
        default=6,
        help="per dtype, in the order on/off/judge/judge/off/on (repeated)",
    )
    parser.add_argument("--preset", default="default", help="the scripts' preset (default)")
    parser.add_argument(
        "--device", default=None, help="cpu: run on the CPU (no GPU step: exploits, JIT)"
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["exploits", "impls", "jit"])
    parser.add_argument("--step-timeout", type=float, default=240, help="seconds per step")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty; nothing is overwritten")
    on_cpu = args.device == "cpu"
    if not on_cpu and not gpu_available():
        print("error: needs a CUDA device (or --device cpu)", file=sys.stderr)
        return 2
    if on_cpu:
        args.skip = [*args.skip, "exploits", "jit"]
    target = Target(args.preset, ("--device", args.device) if args.device else ())
    args.out.mkdir(parents=True, exist_ok=True)
    exploits_exit = None if "exploits" in args.skip else exploit_tests(args.out, args.step_timeout)
    sweeps: list[Sweep] = []
    for dtype in args.dtypes:
        if "jit" not in args.skip:
            with tempfile.TemporaryDirectory() as scratch:
                seconds = warm_jit(Path(scratch), SCRIPTS, args.preset, ["--dtype", dtype])
            print(f"JIT {dtype}: {seconds:.0f} s")
        for index in range(args.default_sweeps):
            mode = MODES[index % len(MODES)]
            sweeps.append(default_sweep(args.out, dtype, mode, index, args.step_timeout, target))
            (args.out / "integrity.md").write_text(report(sweeps, exploits_exit))
        if "impls" not in args.skip:
            sweeps += impl_sweeps(args.out, dtype, args.step_timeout, target)
        (args.out / "integrity.md").write_text(report(sweeps, exploits_exit))
    text = report(sweeps, exploits_exit)
    print(text)
    clean = all(sweep.exit_code == 0 for sweep in sweeps) and exploits_exit in (0, None)
    flagged = any(sweep.flagged for sweep in sweeps)
    return 0 if clean and not flagged else 1


if __name__ == "__main__":
    raise SystemExit(main())
