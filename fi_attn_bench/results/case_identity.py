"""Which rows are the same case across files, runs and the history store: one definition.

A case is its ``api`` and its non-empty case fields, the identity defaults filled in, so a
column a file lacks (an older harness, a seed CSV) reads as empty and the case still matches.
The text is opaque: the store keys cases by it, the summarizer's ``--noise-from`` and the
newest-run choice compare by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from fi_attn_bench.results.schema import IDENTITY_DEFAULTS

_SEPARATOR = "\x1f"  # the ASCII unit separator: no case value holds it


def case_identity(api: str, fields: Mapping[str, str]) -> str:
    """One case as one text; ``fields`` are the row's case cells as text (api left out)."""
    filled = {**IDENTITY_DEFAULTS, **{name: value for name, value in fields.items() if value}}
    parts = [f"{name}={filled[name]}" for name in sorted(filled) if filled[name]]
    return _SEPARATOR.join([api, *parts])


def case_identities(api: Sequence[str], fields: Mapping[str, Sequence[str]]) -> list[str]:
    """``case_identity`` of many rows at once (columns of text, one value per row)."""
    key = pd.Series(np.asarray(api, dtype=object), dtype=object).astype(str)
    for name in sorted({*fields, *IDENTITY_DEFAULTS}):
        default = IDENTITY_DEFAULTS.get(name, "")
        if name in fields:
            values = pd.Series(np.asarray(fields[name], dtype=object), dtype=object)
            values = values.where(values != "", default)
        else:
            values = pd.Series(default, index=key.index, dtype=object)
        present = (values != "").to_numpy()
        if present.any():
            key = key.where(~present, key + f"{_SEPARATOR}{name}=" + values)
    return key.tolist()
