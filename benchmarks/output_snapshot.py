"""Record what the public commands print, write and return on fixed CPU inputs, and compare two records.

A refactor that moves code but changes no behaviour leaves the record unchanged:

    python benchmarks/output_snapshot.py record /tmp/before      # on the old tree
    python benchmarks/output_snapshot.py record /tmp/after       # on the new tree
    python benchmarks/output_snapshot.py compare /tmp/before /tmp/after

Each command's exit code, stdout and stderr are kept, and every file it wrote.  What changes
from run to run is masked: measured columns of the CSVs (times, rates, sample counts, host,
commit, timestamps, run ids), decimal numbers and clock stamps in a sweep's console output,
the temporary folder's path.  The summarizer's reports on checked-in fixtures are kept whole.
Exit: 0 the records match, 1 they differ (the differing files are listed), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU = ("--backend", "torch", "--device", "cpu", "--seed", "0")
SCRIPTS = (
    "bench_batch_decode.py",
    "bench_batch_prefill_paged.py",
    "bench_batch_prefill_ragged.py",
    "bench_batch_mla.py",
)
FIXTURES = "tests/fixtures"
VOLATILE_COLUMN = re.compile(
    r"^time_|timestamp|_ms$|_GB_s$|tflops|^samples$|noise|drift|pct|host|git_|run_id|paired_|"
    r"energy|power|_W$|_per_J$|sm_clock|temp_|notes"
)
STAMP = re.compile(r"\d{8}(\\?_|T)\d{6}Z?(-[0-9a-f]{8})?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
DECIMAL = re.compile(r"\d+\.\d+(e[-+]?\d+)?")
COUNTED = re.compile(r"ETA \d+:\d\d:\d\d|\d+ rounds|\d+ rows? noisy|\d+ of \d+ noisy")
SPACES = re.compile(r"[ \t]+")
WORK = "<work>"


@dataclass(frozen=True)
class Command:
    """One command of the record: its name (a file stem), argv after python, and masking."""

    name: str
    argv: tuple[str, ...]
    measured: bool  # a sweep's console output: decimals and stamps are masked too


def sweep_commands() -> list[Command]:
    one_each = [
        Command(
            f"sweep_{Path(s).stem}",
            (s, *CPU, "--preset", "cpu", "--output-dir", "{w}/" + Path(s).stem),
            True,
        )
        for s in SCRIPTS
    ]
    lists = [
        Command(f"list_{Path(s).stem}", (s, *CPU, "--preset", "smoke", "--list"), False)
        for s in SCRIPTS
    ]
    return [
        *one_each,
        *lists,
        Command("list_serving_decode", (SCRIPTS[0], *CPU, "--preset", "serving", "--list"), False),
        Command(
            "list_filter",
            (SCRIPTS[1], *CPU, "--preset", "default", "--filter", "batch_size<=4", "--list"),
            False,
        ),
        Command("bad_filter", (SCRIPTS[0], *CPU, "--filter", "nonsense=1", "--list"), False),
        Command("bad_shard", ("bench_all.py", *CPU, "--shard", "3/2", "--list"), False),
        Command(
            "bench_all_list_shard",
            ("bench_all.py", *CPU, "--preset", "default", "--list", "--shard", "1/3"),
            False,
        ),
        Command(
            "bench_all", ("bench_all.py", *CPU, "--preset", "cpu", "--output-dir", "{w}/all"), True
        ),
        Command(
            "bench_all_again",
            ("bench_all.py", *CPU, "--preset", "cpu", "--output-dir", "{w}/all"),
            True,
        ),
        Command(
            "resume_decode",
            (SCRIPTS[0], *CPU, "--preset", "cpu", "--resume", "{w}/bench_batch_decode/*.csv"),
            True,
        ),
        Command(
            "h2h_cpu",
            (
                SCRIPTS[0],
                *CPU,
                "--preset",
                "cpu",
                "--filter",
                "batch_size=1",
                "--impl",
                "torch",
                "--impl",
                "other=torch",
                "--output-dir",
                "{w}/h2h",
            ),
            True,
        ),
    ]


def summarizer_commands() -> list[Command]:
    real = f"{FIXTURES}/real_csv"
    summ = f"{FIXTURES}/summarizer"
    face = "summarize_results.py"
    return [
        Command(
            "summary_decode", (face, f"{real}/h100_decode_default.csv", "--output", "-"), False
        ),
        Command(
            "summary_serving_json",
            (
                face,
                f"{real}/h100_paged_serving.csv",
                "--output",
                "{w}/serving.md",
                "--json",
                "{w}/serving.json",
            ),
            False,
        ),
        Command(
            "head_to_head",
            (
                face,
                f"{real}/h100_ragged_fa2_vs_fa3.csv",
                "--output",
                "{w}/h2h.md",
                "--json",
                "{w}/h2h.json",
            ),
            False,
        ),
        Command(
            "regression_gate",
            (
                face,
                "--baseline",
                f"{summ}/legacy_decode.csv",
                "--candidate",
                f"{summ}/new_decode.csv",
                "--fail-on-regression",
                "5",
                "--output",
                "{w}/regression.md",
                "--json",
                "{w}/regression.json",
            ),
            False,
        ),
        Command(
            "regression_seed",
            (
                face,
                "--baseline",
                f"{summ}/seed_v1_decode.csv",
                "--candidate",
                f"{summ}/seed_v1_decode.csv",
                "--fail-on-regression",
                "5",
                "--output",
                "-",
            ),
            False,
        ),
        Command(
            "regression_real",
            (
                face,
                "--baseline",
                f"{real}/h100_decode_default.csv",
                "--candidate",
                f"{real}/h100_decode_default.csv",
                "--only-changed",
                "--output",
                "{w}/real_aa.md",
            ),
            False,
        ),
        Command("summary_missing", (face, "no_such_file.csv"), False),
        Command("summary_cpu_sweep", (face, "{w}/all"), True),
        Command(
            "doctor_cpu",
            ("-m", "fi_attn_bench.doctor", "--device", "cpu", "--output-dir", "{w}/doctor"),
            True,
        ),
    ]


def help_commands() -> list[Command]:
    faces = [*SCRIPTS, "bench_all.py", "summarize_results.py"]
    modules = ["fi_attn_bench.doctor", "fi_attn_bench.device.peaks"]
    return [
        *(Command(f"help_{Path(f).stem}", (f, "--help"), False) for f in faces),
        *(Command(f"help_{m}", ("-m", m, "--help"), False) for m in modules),
    ]


def expand(argv: tuple[str, ...], work: Path) -> list[str]:
    out = []
    for arg in argv:
        arg = arg.replace("{w}", str(work))
        out.extend(sorted(str(p) for p in Path("/").glob(arg.lstrip("/"))) if "*" in arg else [arg])
    return out


def mask_text(text: str, work: Path, measured: bool) -> str:
    text = STAMP.sub("<stamp>", text.replace(str(work), WORK))
    if measured:
        text = SPACES.sub(" ", COUNTED.sub("<counted>", DECIMAL.sub("<n>", text)))
    return text


def mask_csv(text: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    masked = [i for i, name in enumerate(rows[0]) if VOLATILE_COLUMN.search(name)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(rows[0])
    for row in rows[1:]:
        writer.writerow(["<v>" if i in masked and value else value for i, value in enumerate(row)])
    return buffer.getvalue()


def record_files(work: Path, into: Path) -> None:
    """Every file the commands wrote, renamed without stamps and masked."""
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        relative = STAMP.sub("<stamp>", str(path.relative_to(work)))
        target = into / "files" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".png":
            target.write_text("png\n")
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".csv" and "timestamp_utc" in text.partition("\n")[0]:
            text = mask_csv(text)
        masked_numbers = path.suffix in {".md", ".json", ".log"} and "cpu" in relative
        target.write_text(mask_text(text, work, masked_numbers or "doctor" in relative))


def record(into: Path) -> int:
    if into.exists():
        print(f"error: {into} exists; give a new folder", file=sys.stderr)
        return 2
    work = Path(tempfile.gettempdir()) / f"outputsnapshot{os.getpid()}"  # no '_' to escape
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (into / "commands").mkdir(parents=True)
    for command in [*sweep_commands(), *summarizer_commands(), *help_commands()]:
        done = subprocess.run(
            [sys.executable, *expand(command.argv, work)], cwd=ROOT, capture_output=True, text=True
        )
        stem = into / "commands" / command.name
        stem.with_suffix(".rc").write_text(f"{done.returncode}\n")
        stem.with_suffix(".out").write_text(mask_text(done.stdout, work, command.measured))
        stem.with_suffix(".err").write_text(mask_text(done.stderr, work, command.measured))
        print(f"{command.name}: exit {done.returncode}")
    record_files(work, into)
    shutil.rmtree(work)
    return 0


def compare(before: Path, after: Path) -> int:
    names = sorted(
        {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
        | {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    )
    differing = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"only in {'after' if b.exists() else 'before'}: {name}")
            differing += 1
        elif a.read_bytes() != b.read_bytes():
            differing += 1
            print(f"differs: {name}")
            diff = difflib.unified_diff(
                a.read_text().splitlines(), b.read_text().splitlines(), lineterm="", n=1
            )
            print("\n".join(list(diff)[2:22]), flush=True)
    print(f"{len(names)} files, {differing} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("record").add_argument("into", type=Path)
    compared = sub.add_parser("compare")
    compared.add_argument("before", type=Path)
    compared.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.action == "record":
        return record(args.into)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
