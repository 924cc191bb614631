"""Prove a summarizer change leaves every report, stdout, stderr and exit code as it was.

    python benchmarks/summarizer_parity.py --against /path/to/older/checkout
        [--grown /tmp/fi-summarizer-bench] [--work /tmp/fi-summarizer-parity]

Runs summary and regression (Markdown and JSON) with this checkout's summarize_results.py
and with the other checkout's, on the same inputs, and lists every output that differs:
the real CSVs of tests/fixtures/real_csv/, the 200,000-row files bench_summarizer.py grows
from them (when ``--grown`` holds them), the summarizer fixtures, and malformed variants of
a real CSV (ragged, blank and CR lines, quoted line breaks, BOM, bad bytes and numbers, a
missing column, whitespace, quotes inside cells).  Exit 0 when all are identical, else 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fi_attn_bench.sweep.environment import code_version  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "real_csv"
FIXTURES = ROOT / "tests" / "fixtures" / "summarizer"


def malformed_variants(template: Path) -> dict[str, bytes]:
    """Variants of one real CSV, each breaking (or stretching) one reading rule."""
    data = template.read_bytes()
    lines = data.split(b"\n")
    header, rows = lines[0], [line for line in lines[1:] if line]
    first = rows[0]
    cells = first.split(b",")

    def with_rows(*extra: bytes, keep: int = 8) -> bytes:
        return b"\n".join([header, *rows[:keep], *extra]) + b"\n"

    time_at = header.split(b",").index(b"time_ms")
    return {
        "short_row": with_rows(b",".join(cells[:-3])),
        "long_row": with_rows(first + b",extra"),
        "blank_line": with_rows(b"", rows[9]),
        "blank_line_at_end": with_rows(b""),
        "crlf": with_rows().replace(b"\n", b"\r\n"),
        "lone_cr": with_rows().replace(b"\n", b"\r"),
        "bom": b"\xef\xbb\xbf" + with_rows(),
        "bad_utf8": with_rows(first.replace(b"ok", b"ok\xff", 1)),
        "latin1_cell": with_rows(first.replace(b"float16", b"float16\xe9", 1)),
        "non_ascii_cell": with_rows(first.replace(b"float16", "float16 é…".encode(), 1)),
        "quoted_newline": with_rows(first.replace(b"float16", b'"float\n16"', 1)),
        "quote_inside_cell": with_rows(first.replace(b"float16", b'flo"at16', 1)),
        "spaces_around": with_rows(b",".join(b" " + c + b" " for c in cells)),
        "bad_number": with_rows(first.replace(cells[time_at], b"abc", 1)),
        "nan_time": with_rows(first.replace(cells[time_at], b"nan", 1)),
        "negative_time": with_rows(first.replace(cells[time_at], b"-1", 1)),
        "underscore_number": with_rows(first.replace(cells[time_at], b"1_0", 1)),
        "hex_number": with_rows(first.replace(cells[time_at], b"0x10", 1)),
        "empty_time": with_rows(first.replace(cells[time_at], b"", 1)),
        "unknown_status": with_rows(first.replace(b",ok,", b",done,", 1)),
        "missing_column": b"\n".join(
            b",".join(c for i, c in enumerate(line.split(b",")) if i != time_at)
            for line in [header]
        )
        + b"\n",
        "header_only": header + b"\n",
        "empty": b"",
        "no_final_newline": with_rows().rstrip(b"\n"),
        "duplicate_rows": with_rows(rows[0]),
    }


def scenarios(work: Path, grown: Path | None) -> list[tuple[str, list[str]]]:
    """(name, arguments) of every run, inputs written under ``work``."""
    found = []
    inputs = work / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for template in sorted(REAL.glob("*.csv")):
        found.append((f"summary_{template.stem}", [str(template)]))
        for name, data in malformed_variants(template).items():
            path = inputs / f"{template.stem}.{name}.csv"
            path.write_bytes(data)
            found.append((f"summary_{template.stem}.{name}", [str(path)]))
            found.append(
                (
                    f"regression_{template.stem}.{name}",
                    ["--baseline", str(template), "--candidate", str(path)],
                )
            )
    for fixture in sorted(FIXTURES.glob("*.csv")):
        found.append((f"summary_{fixture.stem}", [str(fixture)]))
    templates = sorted(REAL.glob("*.csv"))
    found.append(("summary_all_real", [str(t) for t in templates]))
    found.append(
        ("regression_real", ["--baseline", str(templates[0]), "--candidate", str(templates[0])])
    )
    if grown is not None:
        for base in sorted(grown.glob("*.200000.csv")):
            cand = base.with_name(base.name.replace(".csv", ".cand.csv"))
            found.append((f"summary_grown_{base.stem}", [str(base)]))
            if cand.exists():
                found.append(
                    (
                        f"regression_grown_{base.stem}",
                        ["--baseline", str(base), "--candidate", str(cand)],
                    )
                )
    return found


def hiding(modules: list[str], work: Path) -> list[str]:
    """Folders that make each module's import fail (as if it were not installed)."""
    folders = []
    for module in modules:
        folder = work / "hidden" / module
        (folder / module).mkdir(parents=True, exist_ok=True)
        (folder / module / "__init__.py").write_text(f"raise ImportError('{module} hidden')\n")
        folders.append(str(folder))
    return folders


def run(checkout: Path, arguments: list[str], scratch: Path, hidden=()) -> dict[str, bytes]:
    """One run in an empty folder: its report, JSON, stdout, stderr and exit code."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    path = os.pathsep.join([str(checkout), *hidden])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, str(checkout / "summarize_results.py"), *arguments]
        + ["--output", "report.md", "--json", "report.json"],
        capture_output=True,
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    outputs = {"exit": str(done.returncode).encode(), "stdout": done.stdout, "stderr": done.stderr}
    for name in ("report.md", "report.json"):
        path = scratch / name
        outputs[name] = path.read_bytes() if path.exists() else b"<absent>"
    return outputs


def kept_folder(checkout: Path, work: Path, hidden: list[str]) -> Path | None:
    """Where the other checkout's outputs are kept for the next comparison: by its commit
    and the modules it runs without, so a moved checkout is never judged by old outputs;
    None for a checkout with uncommitted changes."""
    version = code_version(str(checkout))
    if version.dirty != "no":  # uncommitted changes, or no git checkout: run it afresh
        return None
    without = "+".join(Path(folder).name for folder in hidden) or "all"
    return work / "against" / f"{version.commit}-{without}"


def remembered(checkout: Path, name: str, arguments: list[str], work: Path, hidden, kept):
    """The other checkout's outputs of one run, from ``kept`` when an earlier run left them."""
    keys = ("exit", "stdout", "stderr", "report.md", "report.json")
    if kept is not None and (kept / name).is_dir():
        return {key: (kept / name / key).read_bytes() for key in keys}
    outputs = run(checkout, arguments, work / "run", hidden)
    if kept is not None:
        (kept / name).mkdir(parents=True)
        for key in keys:
            (kept / name / key).write_bytes(outputs[key])
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--grown", type=Path, default=None, help="bench_summarizer's data dir")
    parser.add_argument("--work", type=Path, default=Path("/tmp/fi-summarizer-parity"))
    parser.add_argument("--against-hides", nargs="*", default=[], help="modules it runs without")
    parser.add_argument("--hides", nargs="*", default=[], help="modules this checkout runs without")
    args = parser.parse_args(argv)
    against_hidden = hiding(args.against_hides, args.work)
    hidden = hiding(args.hides, args.work)
    against = args.against.resolve()
    kept = kept_folder(against, args.work, against_hidden)
    differing = []
    runs = scenarios(args.work, args.grown)
    for name, arguments in runs:
        ours = run(ROOT, arguments, args.work / "run", hidden)
        theirs = remembered(against, name, arguments, args.work, against_hidden, kept)
        changed = [key for key in ours if ours[key] != theirs[key]]
        if changed:
            differing.append(name)
            print(f"DIFFERS {name}: {', '.join(changed)}", flush=True)
            keep = args.work / "differs" / name
            keep.mkdir(parents=True, exist_ok=True)
            for key in changed:
                (keep / f"ours.{key}").write_bytes(ours[key])
                (keep / f"theirs.{key}").write_bytes(theirs[key])
    print(f"{len(runs) - len(differing)} of {len(runs)} runs identical")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
