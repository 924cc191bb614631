"""Which rows are the same case across files, runs and the history store: one definition.

A case is its ``api`` and its non-empty case fields, the identity defaults filled in, so a
column a file lacks (an older harness, a seed CSV) reads as empty and the case still matches.
The text is opaque: the store keys cases by it, the summarizer's ``--noise-from`` and the
newest-run choice compare by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fi_attn_bench.results.schema import IDENTITY_DEFAULTS

_SEPARATOR = "\x1f"  # the ASCII unit separator: no case value holds it


def case_identity(api: str, fields: Mapping[str, str]) -> str:
    """One case as one text; ``fields`` are the row's case cells as text (api left out)."""
    filled = {**IDENTITY_DEFAULTS, **{name: value for name, value in fields.items() if value}}
    parts = [f"{name}={filled[name]}" for name in sorted(filled) if filled[name]]
    return _SEPARATOR.join([api, *parts])


def case_identities(api: Sequence[str], fields: Mapping[str, Sequence[str]]) -> list[str]:
    """``case_identity`` of many rows at once (columns of text, one value per row): each
    distinct cell's piece made once, each row's key one join (pandas' column-wise string
    additions took 9 s for 200,000 rows)."""
    columns = [[str(text) for text in api]]
    for name in sorted({*fields, *IDENTITY_DEFAULTS}):
        default = IDENTITY_DEFAULTS.get(name, "")
        if name not in fields:
            if default:
                columns.append([f"{_SEPARATOR}{name}={default}"] * len(columns[0]))
            continue
        pieces: dict[str, str] = {}
        column = []
        for cell in fields[name]:
            piece = pieces.get(cell)
            if piece is None:
                value = str(cell) or default
                piece = pieces[cell] = f"{_SEPARATOR}{name}={value}" if value else ""
            column.append(piece)
        columns.append(column)
    return ["".join(parts) for parts in zip(*columns, strict=True)]
