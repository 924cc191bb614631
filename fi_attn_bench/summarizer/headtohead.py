"""Head to head: several implementations (``impl``) of the same cases in one run.

For each API, each case (its parameters without ``impl``) gets the time of every
implementation, the speedup of each against the baseline implementation (the rows'
``baseline_impl``, else the API's first implementation): 1 / ``paired_ratio`` with its 95 %
interval from ``paired_ratio_lo``/``paired_ratio_hi`` where the bench measured them
interleaved, else the ratio of the times; the paired verdict; and the winner (``winner``);
per API, the geometric mean of each implementation's speedup.

Each API's cases are held as columns (a :class:`CaseTable`: one array per quantity, a
row per case, a column per implementation); indexing or iterating it gives one
:class:`CaseComparison` at a time, so a report that shows a few thousand of 100k cases
builds only those.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.summarizer.frames import success_mask
from fi_attn_bench.summarizer.identity import case_ids, view_codes

LABEL_BLOCK = 4096  # cases labelled at once
TIE = "tie"  # the winner where the paired intervals cannot tell the implementations apart


@dataclass(frozen=True)
class ImplResult:
    """One implementation on one case; speedup: above 1, faster than the baseline."""

    impl: str
    time_ms: float
    speedup: float
    speedup_lo: float  # NaN without a paired interval
    speedup_hi: float
    verdict: str = ""  # the bench's paired_verdict against the baseline ("" for the baseline)


@dataclass(frozen=True)
class CaseComparison:
    case: str
    results: tuple[ImplResult, ...]  # in ApiComparison.impls order; absent impls left out
    winner: str  # an impl, or TIE


class CaseTable(Sequence):
    """The cases of one API as columns: ``winners`` one per case; ``present``, ``time_ms``,
    ``speedup``, ``speedup_lo``, ``speedup_hi``, ``verdicts`` and ``rows`` (the view's row,
    -1 where absent) one row per case and one column per implementation (``impls`` order;
    absent cells are NaN / "").  Case labels are made a block at a time as cases are read
    (a report shows a few thousand)."""

    def __init__(
        self, impls, labeller, present, time_ms, speedup, lo, hi, verdicts, winners, rows=None
    ):
        self.impls = tuple(impls)
        self.present = present
        self.rows = np.full(present.shape, -1, dtype=np.int64) if rows is None else rows
        self.time_ms = time_ms
        self.speedup = speedup
        self.speedup_lo = lo
        self.speedup_hi = hi
        self.verdicts = verdicts
        self.winners = winners
        self._labeller = labeller  # case positions -> labels
        self._label_blocks: dict[int, list[str]] = {}

    def __deepcopy__(self, memo):
        return self  # read-only; a copy (dataclasses.asdict makes one) would copy the run

    def label(self, index: int) -> str:
        block = index // LABEL_BLOCK
        if block not in self._label_blocks:
            start = block * LABEL_BLOCK
            positions = np.arange(start, min(start + LABEL_BLOCK, len(self)))
            self._label_blocks[block] = [str(text) for text in self._labeller(positions)]
        return self._label_blocks[block][index % LABEL_BLOCK]

    @property
    def labels(self) -> list[str]:
        return [self.label(index) for index in range(len(self))]

    def __len__(self) -> int:
        return len(self.winners)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._case(index)

    def __iter__(self) -> Iterator[CaseComparison]:
        for index in range(len(self)):
            yield self._case(index)

    def _case(self, index: int) -> CaseComparison:
        results = tuple(
            ImplResult(
                impl,
                float(self.time_ms[index, column]),
                float(self.speedup[index, column]),
                float(self.speedup_lo[index, column]),
                float(self.speedup_hi[index, column]),
                str(self.verdicts[index, column]),
            )
            for column, impl in enumerate(self.impls)
            if self.present[index, column]
        )
        return CaseComparison(self.label(index), results, str(self.winners[index]))

    def verdicts_of(self, impl: str) -> list[str]:
        """The paired verdicts of one implementation, over the cases where it ran."""
        column = self.impls.index(impl)
        return self.verdicts[self.present[:, column], column].tolist()


@dataclass(frozen=True)
class ApiComparison:
    api: str
    baseline_impl: str
    impls: tuple[str, ...]
    cases: CaseTable  # a sequence of CaseComparison
    geomean_speedup: dict  # impl -> geometric mean over cases where both ran ok


def head_to_head(view, ids) -> list[ApiComparison]:
    """Per API with two or more implementations, the side-by-side comparison."""
    if not view.rows or "impl" not in view.case_columns:
        return []
    impl_codes, impls = view_codes(view, "impl")
    if len(set(impl_codes.tolist())) < 2:
        return []
    parameters = [name for name in view.case_columns if name != "impl"]
    groups = case_ids([view], ["api", *parameters])[0]
    ok = success_mask(view.objects("status"))
    apis = view.objects("api")
    found = []
    for api in sorted(set(apis.tolist())):
        rows = np.flatnonzero((apis == api) & ok)
        rows = rows[np.argsort(groups[rows], kind="stable")]
        comparison = _api_comparison(view, str(api), rows, groups, (impl_codes, impls), parameters)
        if comparison is not None:
            found.append(comparison)
    return found


def _api_comparison(view, api, rows, groups, impl, parameters) -> ApiComparison | None:
    """``rows``: the API's successful rows, sorted by case; ``impl``: (code per row, texts)
    of the impl column."""
    impl_codes, impls = impl
    codes = impl_codes[rows]
    order = _impl_order(view, [impls[code] for code in dict.fromkeys(codes.tolist())])
    if order is None:
        return None
    column_of_code = np.array([order.index(t) if t in order else -1 for t in impls], np.int64)
    new_case = np.r_[True, np.diff(groups[rows]) != 0]
    starts, case_of_row = np.flatnonzero(new_case), np.cumsum(new_case) - 1
    cell = _last_row_per_cell(case_of_row, column_of_code[codes], len(starts), len(order))
    has_baseline = cell[:, 0] >= 0  # a case the baseline did not run is not compared
    table = _case_table(view, order, rows, cell[has_baseline], parameters, starts[has_baseline])
    geomean = {}
    for column, name in enumerate(order):
        values = table.speedup[table.present[:, column], column]
        geomean[name] = math.exp(float(np.log(values).mean())) if len(values) else math.nan
    return ApiComparison(api, order[0], tuple(order), table, geomean)


def _impl_order(view, seen: list[str]) -> list[str] | None:
    """The implementations (as first seen), the baseline first; None for fewer than two."""
    order = list(dict.fromkeys(seen))
    if len(order) < 2:
        return None
    stated = [text for text in view.distinct("baseline_impl") or [] if text in order]
    baseline = stated[0] if stated else order[0]
    order.remove(baseline)
    return [baseline, *order]


def _case_table(view, order, rows, cell, parameters, starts) -> CaseTable:
    """The columns of the cases; ``cell``: per case and implementation, the position of its
    row in ``rows`` (-1: absent); ``starts``: each case's first position."""
    present = cell >= 0
    picked = rows[np.where(present, cell, 0)]

    def column(name: str) -> np.ndarray:
        return np.where(present, view.floats(name)[picked], np.nan)

    time_ms, paired = column("time_ms"), column("paired_ratio")
    with np.errstate(divide="ignore", invalid="ignore"):
        # 1 / the paired ratio where the bench measured one, else the ratio of the times.
        speedup = np.where(paired > 0, 1.0 / paired, time_ms[:, :1] / time_ms)
        lo, hi = 1.0 / column("paired_ratio_hi"), 1.0 / column("paired_ratio_lo")
    verdicts = _texts(view, "paired_verdict")
    if verdicts is None:
        verdicts = np.full(present.shape, "", dtype=object)
    else:
        verdicts = np.where(present, verdicts[picked], "").astype(object)
    winners = case_winners(order, time_ms, verdicts, present)

    def labeller(positions: np.ndarray) -> np.ndarray:
        return view.labels(rows[starts[positions]], parameters)

    rows_of = np.where(present, picked, -1)
    return CaseTable(order, labeller, present, time_ms, speedup, lo, hi, verdicts, winners, rows_of)


def case_table(impls, cases) -> CaseTable:
    """``cases`` as a CaseTable: itself, or the columns of a sequence of CaseComparison."""
    if isinstance(cases, CaseTable):
        return cases
    shape = (len(cases), len(impls))
    present = np.zeros(shape, dtype=bool)
    numbers = {name: np.full(shape, np.nan) for name in ("time_ms", "speedup", "lo", "hi")}
    verdicts = np.full(shape, "", dtype=object)
    for index, case in enumerate(cases):
        for result in case.results:
            column = impls.index(result.impl)
            present[index, column] = True
            numbers["time_ms"][index, column] = result.time_ms
            numbers["speedup"][index, column] = result.speedup
            numbers["lo"][index, column] = result.speedup_lo
            numbers["hi"][index, column] = result.speedup_hi
            verdicts[index, column] = result.verdict
    labels = np.array([case.case for case in cases], dtype=object)
    winners = np.array([case.winner for case in cases], dtype=object)
    return CaseTable(impls, labels.__getitem__, present, *numbers.values(), verdicts, winners)


def _last_row_per_cell(case_of_row, column_of_row, cases: int, columns: int) -> np.ndarray:
    """(cases, columns) of positions into the sorted rows, -1 where no row; a case repeated
    for one implementation (an input error reported elsewhere) keeps its last row."""
    cell = np.full((cases, columns), -1, dtype=np.int64)
    flat = case_of_row * columns + column_of_row
    reversed_first = np.unique(flat[::-1], return_index=True)[1]
    last = len(flat) - 1 - reversed_first
    cell.reshape(-1)[flat[last]] = last
    return cell


def case_winners(impls, time_ms, verdicts, present) -> np.ndarray:
    """case_winner of every case at once (``impls[0]`` the baseline; one row per case)."""
    best = np.argmin(np.where(present, time_ms, np.inf), axis=1)
    cases = np.arange(len(best))
    names = np.array(list(impls), dtype=object)
    other = present[:, 1:]
    judged = (other & (verdicts[:, 1:] != "")).any(axis=1)
    all_slower = (~other | (verdicts[:, 1:] == "slower")).all(axis=1)
    best_faster = verdicts[cases, best] == "faster"
    backed = np.where(best == 0, all_slower, best_faster)
    return np.where(~judged | backed, names[best], TIE).astype(object)


def case_winner(results, baseline: str) -> str:
    """The fastest implementation where the paired verdicts back it (a non-baseline one called
    faster, or the baseline when every other was called slower), else TIE; without verdicts
    (implementations from separate sweeps) the lowest time."""
    best = results[0]
    for result in results[1:]:  # the first of the lowest, as min() gives
        if result.time_ms < best.time_ms:
            best = result
    others = [result for result in results if result.impl != baseline]
    if not any(result.verdict for result in others):
        return best.impl
    if best.impl == baseline:
        return best.impl if all(result.verdict == "slower" for result in others) else TIE
    return best.impl if best.verdict == "faster" else TIE


def _texts(view, name: str):
    """A text column as objects ('' where empty), or None when no input has it."""
    if not view.has(name):
        return None
    codes, values = view.codes(name)  # each distinct value made text once; -1 (NaN) is ""
    texts = np.array(["" if v != v or v is None else str(v) for v in values] + [""], object)
    return texts[codes]
