"""Where finished rows go, and which cases a resumed sweep still runs."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fi_attn_bench.backends.impls import DEFAULT_IMPL, TORCH_IMPL, Impl, backend_column
from fi_attn_bench.cases.selection import case_key
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import (
    HARNESS_VERSION,
    IDENTITY_DEFAULTS,
    IMPL_COLUMN,
    STATUS_OK,
    ResultCsvWriter,
)
from fi_attn_bench.sweep.run_options import RunOptions


@dataclass
class ResultStore:
    """Where finished rows go: appended (fresh sweep) or compacted atomically (resume)."""

    writer: ResultCsvWriter
    fields: tuple[str, ...]
    resume: bool
    rows: dict[tuple[str, ...], Mapping[str, object]] = field(default_factory=dict)

    def put(self, record: Mapping[str, object]) -> None:
        if not self.resume:
            self.writer.append(record)
            return
        self.rows[case_key(record, self.fields)] = record
        self.writer.write_all(self.rows.values())


def resume_todo(
    cases: Sequence[Mapping[str, int]],
    rows: Mapping[tuple[str, ...], Mapping],
    fields: Sequence[str],
    impls: Sequence[Impl] = (DEFAULT_IMPL,),
) -> tuple[list[Mapping[str, int]], int]:
    """The cases a resumed sweep still runs (all their implementations: a paired ratio
    needs them measured together), and how many of them were ok but measured by another
    harness version (``HARNESS_VERSION``; none recorded: older), whose time_ms must not sit
    in one file with this version's."""
    todo, stale = [], 0
    for case in cases:
        found = [
            rows.get(case_key({**case, IMPL_COLUMN: impl.name}, (*fields, IMPL_COLUMN)), {})
            for impl in impls
        ]
        if any(row.get("status") != STATUS_OK for row in found):
            todo.append(case)
        elif any(row.get("harness_version", "") != HARNESS_VERSION for row in found):
            todo.append(case)
            stale += 1
    return todo, stale


def row_identity(row: Mapping[str, object]) -> Mapping[str, object]:
    """A stored row with its identity defaults filled in (a CSV from before ``impl``); a
    ``--backend torch`` row of such a CSV measured the torch implementation."""
    filled = {**row, **{k: v for k, v in IDENTITY_DEFAULTS.items() if not row.get(k)}}
    if not row.get(IMPL_COLUMN) and row.get("backend") == TORCH_IMPL.name:
        filled[IMPL_COLUMN] = TORCH_IMPL.name
    return filled


def _conflicts(row: Mapping[str, str], options: RunOptions) -> list[str]:
    wanted = {"dtype": options.dtype_name, "page_size": str(options.page_size)}
    backend_column_of = {impl.name: backend_column(impl) or "" for impl in options.impls}
    if row.get(IMPL_COLUMN, IDENTITY_DEFAULTS[IMPL_COLUMN]) in backend_column_of:
        wanted["backend"] = backend_column_of[row.get(IMPL_COLUMN, IDENTITY_DEFAULTS[IMPL_COLUMN])]
    return [
        f"{name}={row[name]} (now {value})"
        for name, value in wanted.items()
        if row.get(name) and row[name] != value
    ]


def load_resume_rows(
    path: str, spec: BenchmarkSpec, options: RunOptions
) -> dict[tuple[str, ...], dict]:
    """Rows of a resume CSV by case, one per case (an ok row wins over a failed one)."""
    if options.resumed is not None:  # planning read it: the sweep opens the file once
        stored = options.resumed
    else:
        try:
            stored = read_stored_rows(path)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(
                f"--resume {path}: cannot read it ({type(exc).__name__}: {exc})"
            ) from None
    header, rows = list(stored.header), list(stored.rows)
    if not header:
        return {}
    missing = [name for name in ("api", "status", *spec.case_fields) if name not in header]
    if missing:
        raise UsageError(
            f"--resume {path}: not a {spec.script} result file (missing columns: {', '.join(missing)})"
        )
    by_case: dict[tuple[str, ...], dict] = {}
    for row in rows:
        if row.get("api") != spec.api:
            raise UsageError(f"--resume {path}: holds rows of {row.get('api')!r}, not {spec.api}")
        row = dict(row_identity(row))
        if row.get("status") == STATUS_OK and _conflicts(row, options):
            raise UsageError(
                f"--resume {path}: measured with {', '.join(_conflicts(row, options))}; pass the same options"
            )
        key = case_key(row, (*spec.case_fields, IMPL_COLUMN))
        if by_case.get(key, {}).get("status") != STATUS_OK or row.get("status") == STATUS_OK:
            by_case[key] = row
    return by_case


def remove_stale_temporaries(path: str) -> None:
    """Leftovers of an atomic rewrite killed before its rename (``<path>.tmp<pid>``)."""
    for leftover in glob.glob(f"{glob.escape(path)}.tmp*"):
        with contextlib.suppress(OSError):
            os.remove(leftover)
