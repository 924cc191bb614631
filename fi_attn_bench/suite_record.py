"""What bench_all.py records in its output directory (``bench_all.json``) so that
``bench_all.py --resume DIR`` finishes an interrupted run: its scripts, their options, their CSVs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.schema import HARNESS_VERSION
from fi_attn_bench.sweep.outputs import move_aside

RECORD_NAME = "bench_all.json"


@dataclass(frozen=True)
class SuiteRecord:
    """The scripts of a bench_all run in order, the options they share, and each one's CSV
    (a file name inside the run's output directory)."""

    scripts: tuple[str, ...]
    argv: tuple[str, ...]
    csv_names: tuple[str, ...]

    def csv_of(self, script: str) -> str:
        return self.csv_names[self.scripts.index(script)]


def record_path(directory: str) -> str:
    return os.path.join(directory, RECORD_NAME)


def write_record(directory: str, record: SuiteRecord, *, force: bool) -> str | None:
    """Write ``bench_all.json``; an earlier run's is moved aside with ``force`` (its path is
    returned) and refused without it."""
    path, moved = record_path(directory), None
    if os.path.lexists(path):
        if not force:
            raise UsageError(
                f"{directory} holds an earlier bench_all.py run ({RECORD_NAME}): --resume "
                f"{directory} finishes it, --force moves its record aside, or choose another "
                "--output-dir"
            )
        moved = move_aside(path)
    payload = {
        "program": "bench_all.py",
        "harness_version": HARNESS_VERSION,
        "scripts": list(record.scripts),
        "argv": list(record.argv),
        "csv": list(record.csv_names),
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1)
        handle.write("\n")
    return moved


def read_record(directory: str) -> SuiteRecord:
    path = record_path(directory)
    if not os.path.isfile(path):
        raise UsageError(
            f"--resume {directory}: no {RECORD_NAME} there; give the --output-dir of an "
            "interrupted bench_all.py run"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
        record = SuiteRecord(
            tuple(map(str, payload["scripts"])),
            tuple(map(str, payload["argv"])),
            tuple(map(str, payload["csv"])),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--resume {directory}: unreadable {RECORD_NAME} ({exc})") from None
    if len(record.scripts) != len(record.csv_names):
        raise UsageError(f"--resume {directory}: {RECORD_NAME} lists scripts and CSVs unevenly")
    return record


def scripts_in_order(specs: Sequence, record: SuiteRecord) -> list:
    """The specs the record names, in its order (UsageError for a script no spec has)."""
    by_script = {spec.script: spec for spec in specs}
    unknown = [script for script in record.scripts if script not in by_script]
    if unknown:
        raise UsageError(f"{RECORD_NAME} names unknown scripts: {', '.join(unknown)}")
    return [by_script[script] for script in record.scripts]
