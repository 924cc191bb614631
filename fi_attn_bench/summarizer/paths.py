"""Input arguments: a directory stands for the files under it; shards make one run.

A run argument (summary input, baseline or candidate) is every CSV given for it, from any
number of files and directories; files of older runs of the same cases are left out
(``results.reader.read_run``), and a case in two files of the run read is a duplicate
(an input error naming both files).  Rows that record ``shard`` and
``num_shards`` (a sweep split over processes) must cover every shard index; a
missing one is an incomplete run, also an input error (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fi_attn_bench.summarizer.loading import InputIssue

RUN_SOURCE = "(all files of the run)"  # where a run-level issue is found


def expand_paths(paths, pattern: str) -> tuple[list[Path], str | None]:
    """(files, why or None): each directory replaced by the files matching ``pattern``
    under it (recursively, sorted).  A directory holding none stays in the list (the
    CSV reader reports it as unreadable, in the report) and is named in ``why``."""
    files: list[Path] = []
    empty = []
    for path in paths:
        path = Path(path)
        found = (
            sorted(item for item in path.rglob(pattern) if item.is_file()) if path.is_dir() else []
        )
        files.extend(found or [path])
        if path.is_dir() and not found:
            empty.append(os.path.join(str(path), ""))  # "runs/": a directory, as typed
    why = f"no {pattern} file under directory {', '.join(empty)}" if empty else None
    return files, why


def missing_shards(view, group: str) -> list[InputIssue]:
    """An issue when rows record ``num_shards`` but some shard index has no row."""
    if not view.rows:
        return []
    counts = view.floats("num_shards")
    shards = view.floats("shard")
    known = ~np.isnan(counts) & ~np.isnan(shards)  # rows that say which shard of how many
    if not known.any():
        return []
    totals = sorted({int(value) for value in counts[known].tolist()})
    if len(totals) > 1:
        listed = ", ".join(str(total) for total in totals)
        return [InputIssue(RUN_SOURCE, f"inconsistent sharded run: num_shards {listed}", group)]
    total = totals[0]
    seen = {int(value) for value in shards[known].tolist()}
    absent = [index for index in range(total) if index not in seen]
    if not absent:
        return []
    listed = ", ".join(str(index) for index in absent)
    shards = "shard" if len(absent) == 1 else "shards"
    return [
        InputIssue(
            RUN_SOURCE, f"incomplete sharded run: {shards} {listed} of {total} missing", group
        )
    ]
