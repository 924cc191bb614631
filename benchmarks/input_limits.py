"""Time and peak memory of refusing inputs past the reader's limits, at real scale.

    python benchmarks/input_limits.py [--data-dir /tmp/fi-input-limits] [--bomb-gb 4.8]

Each input goes to ``summarize_results.py`` (a regression for the samples files) or
``fi-attn-history add`` as a fresh process; its wall time, peak RSS (wait4), exit code and
its last stderr line are reported.  The inputs: /dev/zero, a FIFO without a writer, a sparse
2 GB file, a file of one 100 MB line (sparse: zeros), a header of 5,000 columns, 1.1 million
blank lines, and a gzip samples file that expands to ``--bomb-gb`` GB of JSON lines (built
once, chunk by chunk, in a few MB of memory; the 28 MB file of the issue expanded to 4.8 GB).
The limits themselves are in fi_attn_bench/results/input_limits.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_CSV = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"


def measured(command: list[str], cwd: Path, timeout_s: float = 120.0) -> str:
    """One fresh process: wall time, exit code, peak RSS (wait4) and its last stderr line."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    errors = cwd / "stderr.txt"
    start = time.perf_counter()
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(
            command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL, stderr=stderr
        )
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout_s:
                process.kill()
                os.wait4(process.pid, 0)
                return f"still running after {timeout_s:g} s (killed)"
            time.sleep(0.01)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    last = errors.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    return (
        f"{wall:.2f} s, exit {process.returncode}, peak RSS {usage.ru_maxrss / 1024:.0f} MB: "
        f"{last[0][:150]}"
    )


def samples_bomb(path: Path, gigabytes: float) -> Path:
    if path.exists():
        return path
    line = json.dumps({"api": "X", "case": {"batch_size": "1"}, "impl": "flashinfer",
                       "samples_ms": [0.125] * 200}) + "\n"  # fmt: skip
    block = (line * ((1 << 20) // len(line) + 1)).encode()
    with gzip.open(path, "wb", compresslevel=9) as stream:
        for _ in range(int(gigabytes * (1 << 30) / len(block))):
            stream.write(block)
    return path


def inputs(data_dir: Path, bomb_gb: float) -> dict[str, Path]:
    made = {"/dev/zero": Path("/dev/zero")}
    fifo = data_dir / "fifo.csv"
    if not fifo.exists():
        os.mkfifo(fifo)
    made["FIFO without a writer"] = fifo
    sparse = data_dir / "sparse_2GB.csv"
    with open(sparse, "wb") as file:
        file.truncate(2 << 30)
    made["2 GB file (sparse)"] = sparse
    long_line = data_dir / "one_line_100MB.csv"
    with open(long_line, "wb") as file:
        file.truncate(100 << 20)
    made["one 100 MB line (sparse)"] = long_line
    wide = data_dir / "wide.csv"
    wide.write_text(",".join(f"c{i}" for i in range(5000)) + "\n")
    made["header of 5,000 columns"] = wide
    blank = data_dir / "blank_lines.csv"
    blank.write_bytes(REAL_CSV.read_bytes().splitlines(keepends=True)[0] + b"\n" * 1_100_000)
    made["1.1 million blank lines"] = blank
    made[f"gzip samples expanding to {bomb_gb:g} GB"] = samples_bomb(
        data_dir / f"bomb_{bomb_gb:g}GB.samples.jsonl.gz", bomb_gb
    )
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/fi-input-limits"))
    parser.add_argument("--bomb-gb", type=float, default=4.8)
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    summarizer = [sys.executable, str(ROOT / "summarize_results.py")]
    history = [sys.executable, "-m", "fi_attn_bench.history", "add"]
    report = args.data_dir / "report.md"
    for label, path in inputs(args.data_dir, args.bomb_gb).items():
        if path.name.endswith(".samples.jsonl.gz"):
            command = [*summarizer, "--baseline", str(REAL_CSV), "--candidate", str(REAL_CSV)]
            command += ["--baseline-samples", str(path), "--candidate-samples", str(path)]
            print(
                f"{label} (summarizer): {measured([*command, '--output', str(report)], args.data_dir)}"
            )
            continue
        summary = measured([*summarizer, str(path), "--output", str(report)], args.data_dir)
        print(f"{label} (summarizer): {summary}")
        store = args.data_dir / "store.sqlite"
        print(
            f"{label} (history add): {measured([*history, str(path), '--store', str(store)], args.data_dir)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
