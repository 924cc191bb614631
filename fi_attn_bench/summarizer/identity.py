"""Case identity: which rows are the same case, in one order for every report.

A case is ``api`` plus every case parameter (identity columns such as ``impl`` and
``workload`` included; a file without one reads as its default, so baselines written
before the column existed still match).  Each row gets an int64 id; ids sort like the
tuples of key values, numbers by value (``seq_len_kv=37`` before ``200``), other text
by text.  A case present twice in one run is an input error, in every mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.results.schema import IDENTITY_DEFAULTS
from fi_attn_bench.summarizer.loading import InputIssue


def natural_key(text: str) -> tuple:
    """Sort key of a case value: numbers by value first, then other text by text."""
    try:
        number = float(text)
    except (TypeError, ValueError):
        return (1, 0.0, str(text))
    return (0, number, str(text)) if math.isfinite(number) else (1, 0.0, str(text))


def natural_sorted(texts) -> list[str]:
    """``sorted(texts, key=natural_key)`` of distinct texts."""
    texts = list(texts)
    return [texts[index] for index in natural_order(texts).tolist()]


def natural_order(texts: list[str]) -> np.ndarray:
    """The indices that sort distinct texts by natural_key.  Case columns are mostly finite
    numbers: then by a numpy sort of their values (by text first only where values tie)."""
    numbers = _float_values(texts)
    if numbers is None or not np.isfinite(numbers).all():
        return np.array(
            sorted(range(len(texts)), key=lambda index: natural_key(texts[index])), dtype=np.int64
        )
    order = np.argsort(numbers, kind="stable")
    ranked = numbers[order]
    if (ranked[1:] == ranked[:-1]).any():  # "1" and "1.0": the text decides
        by_text = np.array(sorted(range(len(texts)), key=texts.__getitem__), dtype=np.int64)
        order = by_text[np.argsort(numbers[by_text], kind="stable")]
    return order


def _float_values(texts: list) -> np.ndarray | None:
    """float() of each text, or None where one is no number."""
    integers = _integer_values(texts)
    if integers is not None:
        return integers
    try:
        return np.array(texts, dtype=object).astype(np.float64)
    except (TypeError, ValueError):
        return None


def _integer_values(texts: list) -> np.ndarray | None:
    """Texts of ASCII digits as float() reads them, in one C parse instead of a call each
    (200k distinct texts: 35 against 58 ms); None for any other text."""
    try:
        digits = "".join(texts)
    except TypeError:  # a text that is no str
        return None
    if not (digits.isascii() and digits.isdecimal()):
        return None
    integers = np.fromstring(" ".join(texts), dtype=np.int64, sep=" ")
    if len(integers) != len(texts) or integers.max(initial=0) >= 2**53:
        return None  # an empty text, or a value past float's integers (or clamped at 2**63 - 1)
    return integers.astype(np.float64)


def natural_codes(parts) -> tuple[np.ndarray, list[str]]:
    """One code space, in natural order, for several (codes, texts) pairs; -1 (absent)
    stays -1.  ``parts``: per run, codes into that run's distinct texts."""
    import pandas as pd

    if len(parts) == 1:  # one run's texts are distinct already: no pooling (200k texts: 20 ms)
        distinct = list(parts[0][1])
        pooled_codes = np.arange(len(distinct))
    else:
        pooled = np.array([text for _, part_texts in parts for text in part_texts], dtype=object)
        pooled_codes, uniques = pd.factorize(pooled)  # the same text in two runs: one code
        distinct = uniques.tolist()
    order = natural_order(distinct)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    joined, start = [], 0
    for codes, part_texts in parts:
        stop = start + len(part_texts)
        mapping = np.append(rank[pooled_codes[start:stop]], -1)
        joined.append(mapping[np.asarray(codes, dtype=np.int64)])  # -1 picks the trailing -1
        start = stop
    texts = [distinct[index] for index in order.tolist()]
    return np.concatenate(joined) if joined else np.zeros(0, np.int64), texts


def identity_filled(name: str, codes: np.ndarray, texts: list[str]) -> tuple[np.ndarray, list]:
    """(codes, texts) of a column with an identity default: absent (-1) and empty cells
    read as the default."""
    default = IDENTITY_DEFAULTS.get(name)
    return (codes, texts) if default is None else default_filled(codes, texts, default)


def default_filled(codes: np.ndarray, texts: list, default: str) -> tuple[np.ndarray, list]:
    """(codes, distinct texts) with absent (-1) and empty cells read as ``default``."""
    texts = [default if text == "" else text for text in texts]
    position = {text: index for index, text in enumerate(dict.fromkeys([*texts, default]))}
    mapping = np.array([*(position[text] for text in texts), position[default]], dtype=np.int64)
    return mapping[np.asarray(codes, dtype=np.int64)], list(position)


def frame_codes(frame, name: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, distinct texts) of a column of a row frame; -1 where absent."""
    import pandas as pd

    if name not in frame.columns:
        return identity_filled(name, np.full(len(frame), -1, dtype=np.int64), [])
    if isinstance(frame[name].dtype, pd.CategoricalDtype):  # the reader's text columns
        codes, uniques = frame[name].cat.codes.to_numpy(), frame[name].cat.categories
    else:
        codes, uniques = pd.factorize(frame[name].to_numpy(dtype=object), use_na_sentinel=True)
    return identity_filled(name, *stripped_codes(codes, uniques.tolist()))


def stripped_codes(codes: np.ndarray, uniques: list) -> tuple[np.ndarray, list[str]]:
    """(codes, distinct texts) with each value as stripped text: values that read the same
    once stripped share one code."""
    import pandas as pd

    texts = [str(value).strip() for value in uniques]
    if texts == uniques:
        return codes, texts
    merged_codes, merged = pd.factorize(np.array(texts, dtype=object))
    return np.append(merged_codes, -1)[np.asarray(codes, dtype=np.int64)], merged.tolist()


def view_codes(view, name: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, distinct texts) of a key column of a FrameView."""
    return frame_codes(view.frame, name)


def case_ids(views, keys: list[str]) -> list[np.ndarray]:
    """The case id of every row of each view; equal ids across views mean one case."""
    sizes = [view.rows for view in views]
    ids = np.zeros(sum(sizes), dtype=np.int64)
    span = 1
    for name in keys:
        codes, texts = natural_codes([view_codes(view, name) for view in views])
        radix = len(texts) + 1
        if span * radix >= 1 << 62:
            values, ids = np.unique(ids, return_inverse=True)
            ids, span = ids.reshape(-1).astype(np.int64), len(values)
        ids = ids * radix + (codes + 1)
        span *= radix
    return np.split(ids, np.cumsum(sizes)[:-1])


@dataclass(frozen=True)
class UniqueCases:
    """Rows of a run whose case is unique, sorted by id, and one issue per repeat."""

    rows: np.ndarray
    ids: np.ndarray
    issues: tuple[InputIssue, ...]


def unique_cases(view, ids: np.ndarray, labels, group: str) -> UniqueCases:
    """Split a run's rows into unique cases and duplicate issues (named by both files)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    repeated = np.zeros(len(sorted_ids), dtype=bool)
    same = sorted_ids[1:] == sorted_ids[:-1]
    repeated[1:] |= same
    repeated[:-1] |= same
    if not repeated.any():
        return UniqueCases(order, sorted_ids, ())
    in_rows = np.zeros(len(ids), dtype=bool)
    in_rows[order] = repeated
    issues = duplicate_issues(view, ids, np.flatnonzero(in_rows), labels, group)
    return UniqueCases(order[~repeated], sorted_ids[~repeated], tuple(issues))


def duplicate_issues(view, ids, rows: np.ndarray, labels, group: str) -> list[InputIssue]:
    """One issue per repeated row after the first of its case, in row order."""
    names = labels(rows)
    sources, lines, apis = (view.texts(name, rows) for name in ("_source", "_line", "api"))
    first_of: dict[int, int] = {}
    issues = []
    for index, case in enumerate(ids[rows].tolist()):
        first = first_of.setdefault(case, index)
        if first == index:
            continue
        issues.append(
            InputIssue(
                str(sources[index]),
                f"duplicate case also found at {sources[first]}:{lines[first]}: "
                f"{apis[index]} ({names[index]})",
                group,
            )
        )
    return issues


def short_labels(labels, limit: int) -> tuple[list[str], str]:
    """(short labels, common text): parameters equal in every label ("name=value, ...")
    move to the common text, the rest stay (cut to ``limit`` characters with "…")."""
    parsed = [[part.partition("=") for part in str(label).split(", ")] for label in labels]
    shared = set.intersection(*(set(parts) for parts in parsed)) if parsed else set()
    if len(parsed) < 2:
        shared = set()
    short = []
    for parts in parsed:
        kept = ", ".join(f"{n}={v}" for n, sep, v in parts if (n, sep, v) not in shared and sep)
        kept = kept or "(same parameters)"
        short.append(kept if len(kept) <= limit else kept[: limit - 1] + "…")
    first = parsed[0] if parsed else []
    common = ", ".join(f"{n}={v}" for n, sep, v in first if (n, sep, v) in shared and sep)
    return short, common
