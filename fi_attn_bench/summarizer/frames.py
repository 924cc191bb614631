"""One standard row frame per run, and the vectorized helpers the models share."""

from __future__ import annotations

import numpy as np

from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    STATUS_FAILED,
    case_columns,
)
from fi_attn_bench.summarizer.identity import default_filled
from fi_attn_bench.summarizer.loading import NUMERIC_OPTIONAL_KINDS, SUCCESS_STATUSES, LoadResult

BASE_COLUMNS = ("api", "status", *NUMERIC_COLUMNS, "error_type", "error", "_source", "_line")


def side_frame(result: LoadResult):
    """All valid rows of a run in one DataFrame: metrics as float, absent columns NaN."""
    import pandas as pd

    if result.tables:
        frames = [table.frame for table in result.tables]
        frame = frames[0].copy(deep=False) if len(frames) == 1 else pd.concat(frames)
        frame["_source"] = _source_column(result.tables)
    else:
        frame = pd.DataFrame.from_records(result.records)
    for name in BASE_COLUMNS:
        if name not in frame.columns:
            frame[name] = "" if name not in NUMERIC_COLUMNS else np.nan
    for name in _numeric_names(frame.columns):
        if frame[name].dtype != np.float64:
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype(np.float64)
    for name, default in IDENTITY_DEFAULTS.items():
        if name in frame.columns:  # rows of files without the column, or empty cells
            frame[name] = _column_default_filled(frame[name], default)
    return frame.reset_index(drop=True)


def _column_default_filled(column, default: str):
    """A column with absent and empty cells read as ``default``; the reader's categoricals
    stay categorical (as object text, 200k rows cost 20 ms here and 15 ms again per key)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes, texts = default_filled(
            column.cat.codes.to_numpy(), column.cat.categories.tolist(), default
        )
        return pd.Categorical.from_codes(codes, categories=texts)
    values = column.to_numpy(dtype=object)
    return np.where(pd.isna(values) | (values == ""), default, values)


def _source_column(tables):
    """Each row's file as a categorical: one code per row instead of one string."""
    import pandas as pd

    sources = list(dict.fromkeys(table.source for table in tables))
    codes = np.concatenate(
        [np.full(len(table.frame), sources.index(table.source), dtype=np.int32) for table in tables]
    )
    return pd.Categorical.from_codes(codes, categories=sources)


def codes_of(frame, name: str) -> tuple[np.ndarray, list]:
    """(integer code per row, distinct values) of a column; categoricals are free."""
    import pandas as pd

    column = frame[name]
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), list(column.cat.categories)
    if column.dtype == np.float64:  # the reader's numbers: no Python float per row
        codes, uniques = pd.factorize(column.to_numpy())
        return codes, uniques.tolist()
    codes, uniques = pd.factorize(column.to_numpy(dtype=object))
    return codes, list(uniques)


def _numeric_names(columns) -> list[str]:
    return [
        name
        for name in columns
        if name in NUMERIC_COLUMNS
        or (
            name in OPTIONAL_COLUMN_BY_NAME
            and OPTIONAL_COLUMN_BY_NAME[name].kind in NUMERIC_OPTIONAL_KINDS
        )
    ]


def frame_case_columns(frame) -> list[str]:
    """The case parameters present in a frame, in display order."""
    return case_columns(name for name in frame.columns if name != "api")


def success_mask(status: np.ndarray) -> np.ndarray:
    """Rows of these statuses that succeeded."""
    return np.isin(status, np.array(sorted(SUCCESS_STATUSES), dtype=object))


def failed_mask(status: np.ndarray) -> np.ndarray:
    return status == STATUS_FAILED


def case_labels(frame, columns: list[str]) -> np.ndarray:
    """describe_case for every row: "name=value, ..." of non-empty parameters, or n/a.

    Each distinct value of a column is formatted once; rows only join pieces.
    """
    import pandas as pd

    pieces = []
    for name in columns:
        codes, uniques = pd.factorize(frame[name].to_numpy(dtype=object), use_na_sentinel=True)
        texts = [f"{name}={value}" if str(value).strip() else "" for value in uniques.tolist()]
        pieces.append(np.array([*texts, ""], dtype=object)[codes])  # code -1 (absent) -> ""
    if not pieces:
        return np.full(len(frame), "n/a", dtype=object)
    labels = [", ".join(filter(None, parts)) or "n/a" for parts in zip(*pieces, strict=True)]
    return np.array(labels, dtype=object)


def optional_floats(frame, name: str) -> np.ndarray:
    """A numeric optional column as float64, all NaN when the run lacks it."""
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return frame[name].to_numpy(dtype=np.float64)


def noise_pct(view) -> np.ndarray:
    """Measured noise of each row in %: noise_pct, else the quartile range over time_ms.
    ``view``: a FrameView."""
    stated = view.floats("noise_pct")
    q1, q3 = view.floats("time_q1_ms"), view.floats("time_q3_ms")
    time_ms = view.floats("time_ms")
    with np.errstate(invalid="ignore", divide="ignore"):
        from_quartiles = (q3 - q1) / time_ms * 100.0
    return np.where(np.isnan(stated), from_quartiles, stated)


def median_ci_pct(view, notch: float) -> np.ndarray:
    """Half-width of each row's 95 % interval of its median, in % of time_ms.

    ``drift_pct`` where the row has it (the harness's interval from consecutive blocks,
    which also covers clock drift); else the notch rule ``notch * IQR / sqrt(samples)``
    from the quartiles (or ``noise_pct``) and the sample count; NaN without them.
    """
    drift = view.floats("drift_pct")
    samples = view.floats("samples")
    with np.errstate(invalid="ignore", divide="ignore"):
        from_spread = notch * noise_pct(view) / np.sqrt(samples)
    return np.where(np.isnan(drift), from_spread, drift)


class FrameView:
    """The columns a summary or comparison reads, from a run's row frame."""

    def __init__(self, frame):
        self.frame = frame
        self.rows = len(frame)
        self.case_columns = frame_case_columns(frame)

    def codes(self, name: str) -> tuple[np.ndarray, list]:
        return codes_of(self.frame, name)

    def floats(self, name: str) -> np.ndarray:
        return optional_floats(self.frame, name)

    def texts(self, name: str, rows) -> list:
        return self.frame[name].iloc[np.asarray(rows, dtype=np.int64)].tolist()

    def objects(self, name: str) -> np.ndarray:
        return self.frame[name].to_numpy(dtype=object)

    def labels(self, rows, columns=None) -> np.ndarray:
        names = self.case_columns if columns is None else columns
        return case_labels(self.frame.iloc[np.asarray(rows, dtype=np.int64)], names)

    def text_range(self, name: str) -> list[str] | None:
        """[smallest, largest] non-empty value of a column (one item when equal)."""
        values = self.distinct(name)
        if not values:
            return None
        return [values[0]] if len(values) == 1 else [values[0], values[-1]]

    def has(self, name: str) -> bool:
        """Whether the run's frame has the column (filled or not)."""
        return name in self.frame.columns

    def distinct(self, name: str) -> list[str] | None:
        """Sorted distinct non-empty values of a column; None when the frame lacks it."""
        import pandas as pd

        if name not in self.frame.columns:
            return None
        column = self.frame[name]
        if isinstance(column.dtype, pd.CategoricalDtype):  # the used categories, no cell objects
            codes = column.cat.codes.to_numpy()
            used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=0))
            values = column.cat.categories.to_numpy(dtype=object)[used]
        else:
            values = pd.unique(column.to_numpy(dtype=object))
        return sorted({str(value) for value in values if value == value and value != ""})

    @staticmethod
    def table(columns: dict):
        import pandas as pd

        return pd.DataFrame(columns)

    @staticmethod
    def concat(tables: list):
        import pandas as pd

        return pd.concat(tables, ignore_index=True)
