"""Runs, not files: the files of a run argument grouped by the invocation that wrote them.

A run is the files of one ``run_id``; a file without one but with ``timestamp_utc`` (an
older harness) is a run of its own; files with neither (the seed's CSVs) are one run
together.  A run is superseded when a newer run (latest ``timestamp_utc``) measured any of
its cases; runs of other cases (bench_all.py's scripts, a sweep's shards) are all kept.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench.results.case_identity import case_identities
from fi_attn_bench.results.reader import LEGACY_SCHEMAS, InputIssue, ResultFile, read_file
from fi_attn_bench.results.schema import case_columns


@dataclass(frozen=True)
class Run:
    """Files measured by one invocation: its ``run_id``, else one file with timestamps (an
    older harness), else every file without either (the seed's CSVs, read as one run)."""

    key: str
    files: tuple[ResultFile, ...]
    newest: str  # latest timestamp_utc of its rows ("" when none is recorded)


@dataclass(frozen=True)
class ResultRun:
    """What a run's arguments hold: the files read as the run, the issues of files that
    could not be read, and the runs left out because a newer run measured their cases."""

    group: str
    paths: tuple[str, ...]
    files: tuple[ResultFile, ...]
    issues: tuple[InputIssue, ...]
    superseded: tuple[Run, ...] = ()
    kept: tuple[Run, ...] = ()

    @property
    def note(self) -> str:
        """One line naming the runs left out, "" when none is."""
        if not self.superseded:
            return ""
        newest = ", ".join(_run_name(run) for run in self.kept)
        older = "; ".join(
            f"{_run_name(run)}: {', '.join(file.source for file in run.files)}"
            for run in self.superseded
        )
        what = "" if self.group == "input" else f"{self.group}: "
        return (
            f"{what}read the newest run ({newest}); older runs of the same cases left out "
            f"(--all-runs reads them too): {older}"
        )


def read_run(
    paths, group: str = "input", *, all_runs: bool = False, keep=None, layouts=LEGACY_SCHEMAS
) -> ResultRun:
    """Read the files of one run argument.  Files from several runs of the same cases
    give the newest run (by ``timestamp_utc``); runs of other cases are kept beside it.
    ``all_runs``: every file as one run (a case in two files is then a duplicate)."""
    files, issues = [], []
    for path in paths:
        read = read_file(path, group, keep=keep, layouts=layouts)
        issues.extend(read.issues)
        if read.file is not None:
            files.append(read.file)
    paths = tuple(str(path) for path in paths)
    runs = group_runs(files)
    if all_runs or len(runs) < 2:
        return ResultRun(group, paths, tuple(files), tuple(issues))
    kept, superseded = newest_runs(runs)
    chosen = {id(file) for run in kept for file in run.files}
    return ResultRun(
        group,
        paths,
        tuple(file for file in files if id(file) in chosen),
        tuple(issues),
        superseded,
        kept,
    )


PARALLEL_READ_BYTES = 16 << 20
"""Run arguments at least this large each are read at once (smaller: a fork costs more)."""


def read_runs(
    arguments: Sequence[tuple[Sequence, str]],
    *,
    all_runs: bool = False,
    keep=None,
    layouts=LEGACY_SCHEMAS,
) -> list[ResultRun]:
    """read_run of each (paths, group), in order.  Large ones are read at once, each but
    the last in a forked process and the last in this one (pandas holds the GIL while it
    makes the text cells, so threads would take turns)."""
    read = functools.partial(read_run, all_runs=all_runs, keep=keep, layouts=layouts)
    if not _worth_forking(arguments):
        return [read(paths, group) for paths, group in arguments]
    import multiprocessing  # here: a summary, which never forks, skips its 10-20 ms import
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(len(arguments) - 1, mp_context=context) as pool:
            others = [pool.submit(read, paths, group) for paths, group in arguments[:-1]]
            last = read(*arguments[-1])
            return [*(future.result() for future in others), last]
    except BrokenProcessPool:  # a child killed (out of memory): read them here instead
        return [read(paths, group) for paths, group in arguments]


def _worth_forking(arguments) -> bool:
    if len(arguments) < 2:
        return False
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) >= 2 and all(
        _total_bytes(paths) >= PARALLEL_READ_BYTES for paths, _ in arguments
    )


def _total_bytes(paths) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass  # read_run reports it
    return total


RUN_ID_COLUMN = "run_id"
_SEED_RUN = "(files without run_id or timestamp_utc)"


def group_runs(files: Sequence[ResultFile]) -> list[Run]:
    """The runs among these files, in the order their first file came."""
    members: dict[str, list[ResultFile]] = {}
    for file in files:
        members.setdefault(_run_key(file), []).append(file)
    return [
        Run(key, tuple(found), max(_newest(file) for file in found))
        for key, found in members.items()
    ]


def _run_key(file: ResultFile) -> str:
    ids = _distinct_texts(file.frame, RUN_ID_COLUMN)
    if ids:
        return f"run_id {ids[-1]}"
    if _distinct_texts(file.frame, "timestamp_utc"):
        return f"file {file.source}"
    return _SEED_RUN


def _distinct_texts(frame, name: str) -> list[str]:
    if name not in frame.columns:
        return []
    return sorted(text for text in frame[name].cat.categories.tolist() if text)


def _newest(file: ResultFile) -> str:
    stamps = _distinct_texts(file.frame, "timestamp_utc")
    return stamps[-1] if stamps else ""


def _run_name(run: Run) -> str:
    return f"{run.key}, {run.newest}" if run.newest else run.key


def newest_runs(runs: Sequence[Run]) -> tuple[tuple[Run, ...], tuple[Run, ...]]:
    """(kept, superseded): a run is superseded when a newer run shares a case with it."""
    order = sorted(range(len(runs)), key=lambda index: runs[index].newest, reverse=True)
    newer: set[str] = set()
    kept, superseded = [], []
    for index in order:
        run = runs[index]
        cases = set().union(*(case_keys(file) for file in run.files))
        (superseded if cases & newer else kept).append(run)
        newer |= cases
    return tuple(kept), tuple(superseded)


def case_keys(file: ResultFile) -> set[str]:
    """Each row's case identity (``case_identity``)."""
    frame = file.frame
    names = [name for name in case_columns(frame.columns) if name != "api"]
    return set(case_identities(frame["api"].astype(str), {n: frame[n].astype(str) for n in names}))
