"""``bisect --from-change N``: the good and bad commits and the case of ``detect``'s N-th change
point (counted from 1, in the order ``detect`` lists them without --cases or --since)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.history.bisect_sources import BisectInputError
from fi_attn_bench.results.run_store import RunStore


@dataclass(frozen=True)
class ChangeEnds:
    good_commit: str  # the run before the change, in the case's own series
    bad_commit: str  # the first run at the new level
    case_terms: dict  # api and the non-empty case fields
    description: str


def change_ends(store_path: Path, number: int) -> ChangeEnds:
    from fi_attn_bench.history.analysis import analyze, case_label

    with RunStore.open(store_path, create=False) as store:
        analysis = analyze(store.history())
    changes = analysis.changes()
    if not 1 <= number <= len(changes):
        raise BisectInputError(
            f"--from-change {number}: detect lists {len(changes)} change point(s) in {store_path}"
        )
    change = changes[number - 1]
    if change.case is None:
        raise BisectInputError(
            f"--from-change {number} is the run-wide level of every case: give --good, --bad, --case"
        )
    series = next(s for s in analysis.series if s.case == change.case and s.device == change.device)
    runs = [analysis.runs[position] for position in series.run_positions.tolist()]
    at = next(i for i, run in enumerate(runs) if run.run_seq == change.run.run_seq)
    good, bad = runs[at - 1].commit if at else "", change.run.commit
    if not good or not bad:
        raise BisectInputError(f"--from-change {number}: a run around it records no commit")
    terms = {"api": change.case.api}
    terms.update({name: str(value) for name, value in change.case.fields.items() if value != ""})
    return ChangeEnds(
        good, bad, terms, f"{change.size_pct:+.2f} % at {bad[:12]}: {case_label(change.case)}"
    )
