"""Where a sweep writes, checked before any measuring: a place it can write, and never over a
file the user already has (a results CSV is finished with --resume or moved aside with --force).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import SCHEMA_VERSION

SAMPLES_SUFFIX = ".samples.jsonl.gz"
STDOUT = "-"  # --output -: the CSV goes to stdout, everything else the sweep prints to stderr


def writes_stdout(path: str) -> bool:
    return path == STDOUT


def probe_directory(directory: str, flag: str, target: str | None = None) -> None:
    """Create ``directory`` if needed and write a temporary file in it; UsageError if either
    fails, naming ``flag`` and ``target`` (the path the user gave; default the directory)."""
    directory, target = directory or ".", target or directory or "."
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"{flag} {target}: {directory} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".fi-attn-bench-probe-"):
            pass
    except OSError as exc:
        raise UsageError(
            f"{flag} {target}: cannot write in {directory} ({exc.strerror or exc})"
        ) from None


def get_csv_path(api_name: str, output_dir: str = ".") -> str:
    """``<output_dir>/<api_name>_<YYYYmmdd_HHMMSS>.csv``."""
    return os.path.join(output_dir, f"{api_name}_{time.strftime('%Y%m%d_%H%M%S')}.csv")


def default_csv_path(api: str, directory: str, suffix: str = "", stamp: str = "") -> str:
    """``<directory>/<api>_<stamp><suffix>.csv`` (``stamp``: YYYYmmdd_HHMMSS unless given, e.g.
    a sharded run's shared tag; ``suffix``: e.g. a shard's ``.shard1of4``), made unique with
    ``-2``, ``-3``... before the suffix when a run of the same stamp already took the name."""
    if stamp:
        stem = os.path.join(directory, f"{api}_{stamp}")
    else:
        stem = get_csv_path(api, directory)[: -len(".csv")]
    path, number = f"{stem}{suffix}.csv", 1
    while os.path.lexists(path):
        number += 1
        path = f"{stem}-{number}{suffix}.csv"
    return path


def samples_path(samples_dir: str, csv_path: str) -> str:
    """``<samples_dir>/<csv stem>.samples.jsonl.gz``: one raw-samples file per CSV."""
    stem = os.path.splitext(os.path.basename(csv_path))[0]
    return os.path.join(samples_dir, stem + SAMPLES_SUFFIX)


def holds_results_of(path: str, spec: BenchmarkSpec) -> bool:
    """Whether ``path`` is a schema-v1 CSV of ``spec``'s api (a previous output of this script)."""
    try:
        stored = read_stored_rows(path)
        header, rows = list(stored.header), list(stored.rows)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    needed = ("schema_version", "api", "status", *spec.case_fields)
    if not header or any(name not in header for name in needed):
        return False
    return all(row["api"] == spec.api and row["schema_version"] == SCHEMA_VERSION for row in rows)


def check_new_output(
    path: str, flag: str, *, force: bool, results_of: BenchmarkSpec | None = None
) -> None:
    """A fresh sweep may write ``path``: its directory is writable, and an existing file there
    is only ever moved aside, with --force (UsageError otherwise).  ``results_of``: the script
    whose results CSV ``path`` is, for the message that offers --resume."""
    probe_directory(os.path.dirname(path), flag, path)
    if not os.path.lexists(path):
        return
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory")
    require_regular_file(path, flag)
    if force:
        return
    if results_of is not None and holds_results_of(path, results_of):
        raise UsageError(
            f"{path} already holds {results_of.script} results: --resume {path} finishes it, "
            "--force moves it aside (to <name>.bak-<timestamp>) and starts afresh"
        )
    what = f" and is not a {results_of.script} results CSV" if results_of is not None else ""
    raise UsageError(
        f"{path} exists{what}: refusing to overwrite it "
        "(--force moves it aside to <name>.bak-<timestamp>)"
    )


def require_regular_file(path: str, flag: str) -> None:
    """A link, device or pipe is refused: moving it aside or replacing it atomically would
    rename or replace the link itself (``/dev/stdout`` is one), not what it points to."""
    if os.path.islink(path) or not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: not a regular file (give the file itself)")


def _backup_name(path: str) -> str:
    """``<path>.bak-<YYYYmmdd_HHMMSS>``, numbered on so as never to replace another backup."""
    stamp = time.strftime("%Y%m%d_%H%M%S")
    target, number = f"{path}.bak-{stamp}", 1
    while os.path.lexists(target):
        number += 1
        target = f"{path}.bak-{stamp}-{number}"
    return target


def move_aside(path: str) -> str:
    """Rename ``path`` to its backup name (``_backup_name``); returns that name."""
    target = _backup_name(path)
    os.replace(path, target)
    return target


def back_up(path: str) -> str:
    """Copy ``path`` to its backup name (``_backup_name``), bytes and times kept; returns it."""
    target = _backup_name(path)
    shutil.copy2(path, target)
    return target
