"""What a results CSV records about its sweep's case selection (``preset``, ``filter`` columns),
so that ``--resume CSV`` alone reruns exactly the interrupted sweep's cases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_key, parse_filter
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.reader import StoredRows, read_stored_rows


@dataclass(frozen=True)
class Selection:
    """A sweep's cases: a preset and --filter texts (each a ','-joined AND of terms)."""

    preset: str
    filters: tuple[str, ...] = ()

    def columns(self) -> dict[str, str]:
        return {"preset": self.preset, "filter": ",".join(self.filters)}

    def options_text(self) -> str:
        words = f"--preset {self.preset}"
        return words + "".join(f" --filter '{text}'" for text in self.filters)


def read_resumed(path: str) -> StoredRows:
    """The rows of ``--resume path``; UsageError where it cannot be read."""
    try:
        return read_stored_rows(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--resume {path}: cannot read it ({type(exc).__name__}: {exc})") from None


def recorded_selection(
    path: str, spec: BenchmarkSpec, stored: StoredRows | None = None
) -> Selection | None:
    """The selection a results CSV records, or None when it records none (written before the
    ``preset`` column existed, or no row yet); ``stored``: its rows, already read."""
    stored = read_resumed(path) if stored is None else stored
    header, rows = list(stored.header), list(stored.rows)
    rows = [row for row in rows if row.get("preset", "")]
    if "preset" not in header or not rows:
        return None
    presets = {row["preset"] for row in rows}
    filters = {row.get("filter", "") for row in rows}
    if len(presets) > 1 or len(filters) > 1:
        raise UsageError(
            f"--resume {path}: its rows come from different selections "
            f"(presets {', '.join(sorted(presets))}); resume each sweep's own CSV"
        )
    (preset,), (text,) = presets, filters
    if preset not in (*serving.preset_names(spec), serving.COMMAND_LINE_CASES):
        raise UsageError(f"--resume {path}: records preset {preset!r}, which {spec.script} lacks")
    return Selection(preset, (text,) if text else ())


def _same_filters(a: Sequence[str], b: Sequence[str], fields: Sequence[str]) -> bool:
    def terms(texts: Sequence[str]) -> frozenset:
        return frozenset(term for text in texts for term in parse_filter(text, fields))

    return terms(a) == terms(b)


def resume_selection(
    spec: BenchmarkSpec, asked, recorded: Selection | None, path: str, default_preset: str
) -> Selection:
    """The selection of ``--resume path``: the recorded one; --preset/--filter given too must
    agree with it (UsageError naming the recorded options otherwise)."""
    given = Selection(asked.preset or default_preset, tuple(asked.filter))
    if recorded is None:
        return given
    preset_differs = asked.preset and asked.preset != recorded.preset
    filter_differs = asked.filter and not _same_filters(
        asked.filter, recorded.filters, spec.case_fields
    )
    if preset_differs or filter_differs:
        raise UsageError(
            f"--resume {path}: the interrupted sweep selected {recorded.options_text()}; "
            "give no --preset/--filter (or these) to finish it"
        )
    return recorded


def check_unrecorded_cases(
    path: str,
    spec: BenchmarkSpec,
    selection: Selection,
    cases: Sequence[Mapping[str, int]],
    stored: StoredRows | None = None,
) -> None:
    """A CSV without a recorded selection may only be resumed by a selection holding its cases."""
    rows = list((read_stored_rows(path) if stored is None else stored).rows)
    wanted = {case_key(case, spec.case_fields) for case in cases}
    if any(case_key(row, spec.case_fields) not in wanted for row in rows):
        raise UsageError(
            f"--resume {path}: holds cases outside {selection.options_text()} (it records no "
            "selection); give the interrupted sweep's --preset and --filter"
        )
