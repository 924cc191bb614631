"""``--fib DIR``: the cases one script measures of a FIB dataset, and the run's dtype and page size.

A run has one dtype and one page size (CSV columns every row shares), so a script measures the
definitions of one (dtype, page size): the dataset's when it has one, else the one that
``--dtype`` / ``--page-size`` name.  Definitions no script measures are listed with the reason.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench.cases.spec import DEFAULT_PAGE_SIZE, BenchmarkSpec
from fi_attn_bench.errors import NoMatchingCase
from fi_attn_bench.fib.dataset import Dataset, FibError, read_dataset
from fi_attn_bench.fib.mapping import Mapped, Unmapped, fib_case, mapped_definitions
from fi_attn_bench.fib.solutions import solutions_asked

DEFAULT_DTYPE = "float16"  # the parser's --dtype default


@dataclass(frozen=True)
class FibSelection:
    """What ``--fib`` gives one script: its cases (unresolved), dtype and page size."""

    cases: tuple[dict, ...]
    dtype: str
    page_size: int
    notes: tuple[str, ...]  # one line per definition left out, with the reason


def notes_of(dataset: Dataset) -> tuple[str, ...]:
    """One line per definition no script measures, or with no workload, and why."""
    with_workloads = {w.definition for w in dataset.workloads}
    lines = []
    for found in mapped_definitions(dataset):
        name = found.definition.name
        if isinstance(found, Unmapped):
            lines.append(f"fib: definition {name} not measured: {found.reason}")
        elif name not in with_workloads:
            lines.append(f"fib: definition {name} ({found.kind.label}) has no workload")
    orphans = sorted({w.definition for w in dataset.workloads} - set(dataset.definitions))
    lines += [f"fib: workloads of {name} left out: no such definition" for name in orphans]
    return tuple(lines)


def _check_solution(solution, dataset: Dataset, names, script: str) -> None:
    """A ``--impl fib:NAME`` whose definition this script does not measure: why, in one line
    (NoMatchingCase, so bench_all leaves the script out)."""
    where = f"--impl fib:{solution.name}: its definition {solution.definition!r}"
    if solution.definition not in dataset.definitions:
        raise FibError(f"{where} is not in --fib")
    if solution.definition not in names:
        raise NoMatchingCase(f"{where} is not one that {script} measures")


def _group(found: Mapped) -> tuple[str, int | None]:
    return found.dtype, found.page_size


def _chosen_group(
    script: str, groups: set[tuple[str, int | None]], dtype: str, page_size: int
) -> tuple[str, int | None]:
    """The (dtype, page size) this run measures; a value given other than the default must agree."""
    if len(groups) == 1:
        chosen = next(iter(groups))
        given_dtype = dtype != DEFAULT_DTYPE and dtype != chosen[0]
        given_size = chosen[1] is not None and page_size not in (DEFAULT_PAGE_SIZE, chosen[1])
        if given_dtype or given_size:
            raise FibError(
                f"--fib: {script}'s definitions are {_text(chosen)}; --dtype {dtype} "
                f"--page-size {page_size} disagree"
            )
        return chosen
    for group in groups:
        if group[0] == dtype and group[1] in (None, page_size):
            return group
    listed = ", ".join(sorted(_text(g) for g in groups))
    raise FibError(
        f"--fib: {script}'s definitions come in several dtypes or page sizes ({listed}); "
        "pick one with --dtype and --page-size"
    )


def _text(group: tuple[str, int | None]) -> str:
    return group[0] if group[1] is None else f"{group[0]} page size {group[1]}"


def _signature(directory: str) -> tuple:
    """Every file's name, size and change time: a changed dataset is read again."""
    found = []
    for here, _, names in os.walk(directory):
        for name in names:
            try:
                stat = os.stat(os.path.join(here, name))
            except OSError:
                continue
            found.append((here, name, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def select(
    spec: BenchmarkSpec,
    directory: str,
    dtype: str,
    page_size: int,
    impl_texts: Sequence[str] = (),
) -> FibSelection:
    """The cases of ``directory`` that ``spec``'s script measures (FibError: one line, exit 2;
    NoMatchingCase when it measures none, so bench_all leaves it out); with ``--impl fib:NAME``
    only the workloads of those solutions' definitions.  Planning asks several times: the
    answer is kept while no file of the dataset changes."""
    signature = _signature(directory) if os.path.isdir(directory) else ()
    return _select(spec.script, directory, dtype, page_size, tuple(impl_texts), signature)


@functools.lru_cache(maxsize=8)
def _select(
    script: str,
    directory: str,
    dtype: str,
    page_size: int,
    impl_texts: tuple[str, ...],
    signature: tuple,
) -> FibSelection:
    dataset = read_dataset(directory)
    asked = solutions_asked(dataset, impl_texts)
    only = {solution.definition for solution in asked}
    mine = [
        found
        for found in mapped_definitions(dataset)
        if isinstance(found, Mapped)
        and found.kind.script == script
        and (not only or found.definition.name in only)
    ]
    names = {found.definition.name: found for found in mine}
    for solution in asked:
        _check_solution(solution, dataset, names, script)
    workloads = [w for w in dataset.workloads if w.definition in names]
    if not workloads:
        raise NoMatchingCase(f"--fib {directory}: no workload that {script} measures")
    groups = {_group(names[w.definition]) for w in workloads}
    chosen = _chosen_group(script, groups, dtype, page_size)
    cases = tuple(
        fib_case(names[w.definition], w, directory)
        for w in workloads
        if _group(names[w.definition]) == chosen
    )
    return FibSelection(cases, chosen[0], chosen[1] or page_size, notes_of(dataset))
