"""The one reader of result CSVs: schema v1 and the seed's legacy layouts, on pandas.

``read_file`` reads and validates one CSV with the seed's rules and messages (header,
ragged rows, statuses, metrics, registered optional columns); ``runs.read_run`` reads the
files of a run argument with it; ``read_stored_rows`` gives the cells of a file exactly as
written, for a sweep that resumes it and the tools that only need its text.

pandas pads a short row with empty cells, so it reads the file through ``MarkedStream``, which
appends a marker cell to every line: a complete row ends with the marker in the column after
the header's, a short one has it earlier, a long one later.
"""

from __future__ import annotations

import csv
import io
import math
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.results import input_limits
from fi_attn_bench.results.input_limits import InputLimitError, OpenedOnce, open_regular
from fi_attn_bench.results.marked_stream import (
    LINE_MARK,
    MARKER,
    MarkedStream,
    unmarked_text,
)
from fi_attn_bench.results.schema import (
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    STATUS_OK,
    Kind,
)

SUCCESS_STATUSES = frozenset((STATUS_OK, STATUS_LEGACY_OK))
V1_REQUIRED_COLUMNS = frozenset(RESULT_COLUMNS)
LEGACY_FILLED = ("schema_version", "status", "error_type", "error")
# The four per-wrapper layouts the seed's scripts wrote before schema v1 (case
# parameters of decode, MLA, paged prefill, ragged prefill) plus api and metrics.
_LEGACY_CASES = (
    ("batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim"),
    ("batch_size", "seq_len", "num_heads", "head_dim_ckv", "head_dim_kpe"),
    ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim"),
    ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo"),
)


def result_layout(case_fields: Iterable[str]) -> frozenset[str]:
    """The columns a file of a script with these case fields has: api, metrics, cases."""
    return frozenset(("api", *NUMERIC_COLUMNS, *case_fields))


LEGACY_SCHEMAS = tuple(result_layout(cases) for cases in _LEGACY_CASES)
NUMERIC_OPTIONAL_KINDS = frozenset(
    (Kind.COUNT, Kind.POSITIVE, Kind.NON_NEGATIVE, Kind.FINITE, Kind.NON_NEGATIVE_INT)
)

_MARK_COLUMN = "\x00marker"
_MAX_RETRIES = 8  # longer rows than the parser expected: each retry widens it
_EXPECTED_FIELDS = re.compile(r"Expected \d+ fields in line \d+, saw (\d+)")
_EOF_IN_QUOTES = "EOF inside string"  # pandas' error for a quoted cell the file never closes


@dataclass(frozen=True)
class InputIssue:
    """One reason an input cannot be trusted: where, what, and which run it belongs to."""

    source: str
    message: str
    group: str = "input"


@dataclass(frozen=True)
class ResultFile:
    """The validated rows of one CSV: text stripped (categorical), numbers float64, ``_line``."""

    source: str
    columns: tuple[str, ...]  # the record keys in the seed's order (header + filled legacy ones)
    frame: object  # pandas.DataFrame, one row per CSV row
    legacy: bool


@dataclass(frozen=True)
class FileRead:
    """What reading one CSV gave: its file (None when invalid) and why it is invalid."""

    file: ResultFile | None
    issues: tuple[InputIssue, ...]


@dataclass(frozen=True)
class StoredRows:
    """A result CSV's header and complete rows, each cell the text written."""

    header: tuple[str, ...]
    rows: tuple[dict[str, str], ...]


# ------------------------------------------------------------------- row rules


def parse_float(value) -> float | None:
    """A finite float from a cell, or None: the seed's metric parser."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def metric_error(column: str, value) -> str | None:
    """The seed's message for an invalid metric of a successful row, else None."""
    number = parse_float(value)
    if number is None:
        return f"{column} must be a finite number"
    if column == "time_ms" and number <= 0:
        return "time_ms must be greater than zero"
    if column != "time_ms" and number < 0:
        return f"{column} must not be negative"
    return None


def header_error(
    fieldnames: Sequence[str] | None, layouts: Sequence[frozenset[str]] = LEGACY_SCHEMAS
) -> tuple[str | None, str | None]:
    """(layout "v1" or "legacy", None) for a usable header, else (None, the seed's message).
    ``layouts``: the column sets a file may have (the seed's four scripts')."""
    if not fieldnames:
        return None, "CSV header is missing"
    if any(not name for name in fieldnames):
        return None, "CSV contains an empty header name"
    if any(name != name.strip() for name in fieldnames):
        return None, "CSV header names must not contain surrounding whitespace"
    if len(fieldnames) != len(set(fieldnames)):
        return None, "CSV contains duplicate header names"
    names = frozenset(fieldnames)
    known = any(schema.issubset(names) for schema in layouts)
    if "schema_version" in names or "status" in names:
        missing = sorted(V1_REQUIRED_COLUMNS - names)
        if missing:
            return None, f"schema v1 is missing columns: {', '.join(missing)}"
        if not known:
            return None, "CSV does not match a known FlashInfer benchmark schema"
        return "v1", None
    if not known:
        return None, "CSV does not match a known legacy FlashInfer schema"
    return "legacy", None


def row_error(record: dict, layout: str) -> str | None:
    """The first rule a stripped row breaks (seed order, then optional columns)."""
    if not record.get("api"):
        return "api must not be empty"
    if layout == "v1":
        error = _v1_status_error(record)
        if error:
            return error
        status = record["status"]
    else:
        status = STATUS_LEGACY_OK
    if status in SUCCESS_STATUSES:
        for column in NUMERIC_COLUMNS:
            error = metric_error(column, record.get(column))
            if error:
                return error
    for name, text in record.items():
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is not None and text:
            error = column.check(text)
            if error:
                return error
    return None


def _v1_status_error(record: dict) -> str | None:
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        return f"unsupported schema_version {version!r}; expected {SCHEMA_VERSION!r}"
    status = record.get("status")
    if status not in (STATUS_OK, STATUS_FAILED):
        return f"unsupported status {status!r}"
    has_error = bool(record.get("error_type") or record.get("error"))
    if status == STATUS_OK and has_error:
        return "successful rows must not contain error details"
    if status == STATUS_FAILED and not has_error:
        return "failed rows must contain error_type or error"
    return None


def is_numeric_column(name: str) -> bool:
    """Metrics and numeric optional columns: held as float64."""
    column = OPTIONAL_COLUMN_BY_NAME.get(name)
    return name in NUMERIC_COLUMNS or (column is not None and column.kind in NUMERIC_OPTIONAL_KINDS)


def _read_header(path) -> list[str] | None:
    """The first row of the file, as csv.reader gives it; None for an empty file or one that
    starts with a blank line (csv.DictReader's missing header)."""
    try:
        return _parsed_header(path)
    except UnicodeDecodeError as exc:
        return _header_as_the_seed_reads(path, exc)


def _header_as_the_seed_reads(path, error: UnicodeDecodeError) -> list[str] | None:
    """The first row by csv.reader over text decoded block by block, as the seed reads it: a
    bad byte past the blocks that row spans is met only by the body's parse."""
    try:
        raw = open_regular(path, input_limits.MAX_CSV_BYTES)
        with io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as file:
            row = next(csv.reader(file), None)
    except (UnicodeDecodeError, csv.Error):
        raise error from None
    return row if row and row != [""] else None


def _columns_within_limit(path) -> None:
    """InputLimitError when the first line holds more than MAX_COLUMNS cells: counted on its
    bytes (a line is at most MAX_LINE_BYTES) before pandas makes a column of each."""
    with open_regular(path, input_limits.MAX_CSV_BYTES) as file:
        line = file.readline(input_limits.MAX_LINE_BYTES + 1)
    if line.count(b",") < input_limits.MAX_COLUMNS:
        return
    text = line.decode("utf-8", errors="surrogateescape")
    cells = next(csv.reader([text]), [])
    if len(cells) > input_limits.MAX_COLUMNS:
        raise InputLimitError(
            f"the header has {len(cells):,} columns, over the limit of {input_limits.MAX_COLUMNS:,}"
        )


def _parsed_header(path) -> list[str] | None:
    import pandas as pd

    _columns_within_limit(path)
    try:
        first = _read_marked(path, nrows=1, dtype=object)
    except pd.errors.EmptyDataError:
        return None
    cells = [unmarked_text(cell) for cell in first.iloc[0].tolist()] if len(first) else []
    if MARKER not in cells:
        return None
    header = cells[: cells.index(MARKER)]
    return header if header != [""] else None


def _read_marked(path, *, complete_lines: bool = False, ahead: bool = False, **options):
    """``pd.read_csv(**options)`` of the marked stream: no header, UTF-8 text, blank lines and
    empty cells kept.  A file that ends inside a quoted cell is read again with that cell and
    its row ended there, as the seed's csv module ends them; a cut-off file
    (``complete_lines``) keeps pandas' error."""
    import pandas as pd

    def parse(open_quote: bool):
        with MarkedStream(path, complete_lines, ahead, open_quote) as stream:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return pd.read_csv(
                    stream,
                    **{"header": None, **options},
                    keep_default_na=False,
                    skip_blank_lines=False,
                    encoding="utf-8",
                    encoding_errors="surrogateescape",
                    engine="c",
                )

    try:
        return parse(open_quote=False)
    except pd.errors.ParserError as exc:
        if complete_lines or _EOF_IN_QUOTES not in str(exc):
            raise
    return parse(open_quote=True)


def _past_header(spares: int) -> dict:
    """read_csv's options that skip the header line: ``header=0`` (its names replaced),
    0.12 s faster on the paged file than ``skiprows=1`` with usecols, but pandas refuses
    names longer than that line, as a row with spare cells needs."""
    return {"header": 0} if spares == 0 else {"skiprows": 1}


def _parse(path, header: list[str], *, text: bool, keep=None, complete_lines=False):
    """The rows after the header as a DataFrame with the marker column (and any cells past
    it as spare columns); ``text``: every column as text, else numbers as float64 (a cell
    that is no number raises ValueError).  ``keep``: the header columns to convert."""
    import pandas as pd

    spares = 0
    for _ in range(_MAX_RETRIES):
        names = [*header, _MARK_COLUMN, *(f"\x00spare{i}" for i in range(spares))]
        wanted = [*(name for name in header if keep is None or name in keep), _MARK_COLUMN]
        if text:
            wanted += names[len(header) + 1 :]
        dtypes = {
            name: (np.float64 if not text and is_numeric_column(name) else object)
            for name in wanted
        }
        try:
            frame = _read_marked(
                path,
                complete_lines=complete_lines,
                ahead=True,
                **_past_header(spares),
                names=names,
                usecols=None if text else wanted,  # usecols needs a full first row
                dtype=dtypes,
                na_values={name: [""] for name, kind in dtypes.items() if kind is not object},
                index_col=False,
            )
        except pd.errors.EmptyDataError:
            frame = pd.DataFrame({name: pd.Series([], dtype=dtypes[name]) for name in wanted})
        except pd.errors.ParserError as exc:
            found = _EXPECTED_FIELDS.search(str(exc))
            if found is None:
                raise
            spares = int(found.group(1)) - len(header)
            cells = int(found.group(1)) - 1  # the stream's marker is no cell of the file
            if cells > input_limits.MAX_COLUMNS:
                raise InputLimitError(
                    f"a row has {cells:,} cells, over the limit of "
                    f"{input_limits.MAX_COLUMNS:,} columns"
                ) from None
            continue
        return frame[[name for name in names if name in frame.columns]]
    raise ValueError("rows of too many different lengths")


# ---------------------------------------------------------------- one file


def read_file(
    path,
    group: str = "input",
    *,
    keep: Iterable[str] | None = None,
    layouts: Sequence[frozenset[str]] = LEGACY_SCHEMAS,
) -> FileRead:
    """Read and validate one CSV: its rows when every row is valid, else the issues.

    ``keep``: the text columns a caller reads (None: all); validation reads every column
    whose cells have a rule, whatever ``keep`` says.  ``layouts``: see header_error.
    """
    source = str(path)
    try:
        header = _read_header(path)
    except (OSError, UnicodeError, ValueError) as exc:
        return FileRead(None, (InputIssue(source, f"unable to read CSV: {exc}", group),))
    layout, error = header_error(header, layouts)
    if error:
        return FileRead(None, (InputIssue(source, error, group),))
    wanted = None if keep is None else _validated_columns(header, keep)
    try:
        frame, messages = _validated_frame(path, header, layout, wanted)
    except (OSError, UnicodeError, ValueError) as exc:
        return FileRead(None, (InputIssue(source, f"unable to read CSV: {exc}", group),))
    if messages:
        return FileRead(None, tuple(InputIssue(source, text, group) for text in messages))
    if len(frame) == 0:
        return FileRead(None, (InputIssue(source, "CSV contains no benchmark rows", group),))
    columns = [*header, *(name for name in LEGACY_FILLED if name not in header)]
    return FileRead(
        ResultFile(
            source, tuple(columns if layout == "legacy" else header), frame, layout == "legacy"
        ),
        (),
    )


def _validated_columns(header: list[str], keep: Iterable[str]) -> set[str]:
    """Columns to read: those asked for, the result columns, case parameters and every
    column whose cells have a rule."""
    wanted = set(keep) | set(RESULT_COLUMNS)
    for name in header:
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is None or column.kind is not Kind.TEXT:
            wanted.add(name)
    return wanted


def _validated_frame(path, header, layout, wanted):
    """(frame, []) of a valid file, else (None, the seed's messages).  Numbers are parsed by
    pandas; a file whose cells pandas cannot vouch for is read again as text and judged
    row by row, so every message quotes the cell as written."""
    try:
        frame = _parse(path, header, text=False, keep=wanted)
    except ValueError:
        frame = None
    if frame is not None and _complete(frame):
        frame = _finished(frame.drop(columns=_MARK_COLUMN), layout)
        if not _suspect_rows(frame, header, layout).any():
            return _metrics_finite_or_nan(frame), []
    return _judged(path, header, layout, wanted)


def _metrics_finite_or_nan(frame):
    """A failed row's infinite metric (``1e400``) as NaN, as the text path reads it; every
    other infinity made its row suspect and went that way."""
    for name in NUMERIC_COLUMNS:
        values = frame[name].to_numpy()
        infinite = np.isinf(values)
        if infinite.any():
            frame[name] = np.where(infinite, np.nan, values)
    return frame


def _complete(frame) -> bool:
    return bool((frame[_MARK_COLUMN].to_numpy() == MARKER).all())


def _unmarked(frame):
    """Text cells with a quoted line break hold the marker before it: take it out."""
    for name in frame.columns:
        if name != _MARK_COLUMN and frame[name].dtype == object:
            values = frame[name].astype(object)  # a pyarrow-backed str cannot hold the marker
            if values.str.contains(MARKER, regex=False).any():
                frame[name] = values.str.replace(LINE_MARK, "", regex=False)
    return frame


def _judged(path, header, layout, wanted):
    """Every row as text, the seed's way: blank lines skipped, ragged rows and broken rules
    named by line; (frame, []) when nothing is wrong."""
    frame = _unmarked(_parse(path, header, text=True))
    cells = frame.to_numpy(dtype=object)
    width = len(header)
    marker_at = cells == MARKER
    complete = marker_at[:, width]
    short = ~complete & marker_at[:, :width].any(axis=1)
    blank = short & marker_at[:, 1] & (cells[:, 0] == "") if width > 1 else short & False
    keep = ~blank
    cells, complete, short = cells[keep], complete[keep], short[keep]
    messages = []
    records = []
    for index, row in enumerate(cells):
        line = index + 2
        if not complete[index]:
            kind = "fewer" if short[index] else "more"
            messages.append(f"line {line}: row has {kind} values than the CSV header")
            continue
        record = {name: str(value).strip() for name, value in zip(header, row, strict=False)}
        error = row_error(record, layout)
        if error:
            messages.append(f"line {line}: {error}")
        elif not messages:
            records.append(record)
    if messages:
        return None, messages
    return _from_records(records, header, layout, wanted), []


def _from_records(records, header, layout, wanted):
    import pandas as pd

    names = [name for name in header if wanted is None or name in wanted]
    frame = pd.DataFrame.from_records(records, columns=header)[names]
    for name in names:
        if is_numeric_column(name):
            frame[name] = np.array([_float_or_nan(v) for v in frame[name]], dtype=np.float64)
    return _finished(frame, layout, stripped=True)


def _float_or_nan(text) -> float:
    number = parse_float(text)
    return math.nan if number is None else number


def _finished(frame, layout: str, stripped: bool = False):
    """Text columns as stripped categoricals, the line numbers, legacy's filled columns."""
    import pandas as pd

    for name in frame.columns:
        if frame[name].dtype == object:
            frame[name] = _stripped_categories(frame[name], already=stripped)
    frame["_line"] = np.arange(2, len(frame) + 2, dtype=np.int64)
    if layout == "legacy":
        for name, value in zip(LEGACY_FILLED, ("", STATUS_LEGACY_OK, "", ""), strict=True):
            frame[name] = pd.Categorical.from_codes(
                np.zeros(len(frame), dtype=np.int8), categories=[value]
            )
    return frame


def _stripped_categories(values, already: bool = False):
    """A text column as a categorical of its stripped cells (each distinct cell stripped once)."""
    import pandas as pd

    codes, uniques = factorize_text(values.to_numpy(dtype=object))
    texts = [str(text) for text in uniques.tolist()]
    distinct = True  # factorize's uniques are, until a marker taken out makes two equal
    if MARKER in "".join(texts):
        texts = [unmarked_text(text) for text in texts]
        distinct = len(set(texts)) == len(texts)
    stripped = texts if already else [text.strip() for text in texts]
    if distinct and stripped == texts:
        return pd.Categorical.from_codes(codes, categories=pd.Index(texts, dtype=object))
    merged, inverse = np.unique(np.array(stripped, dtype=object), return_inverse=True)
    categories = pd.Index(merged.tolist(), dtype=object)
    return pd.Categorical.from_codes(inverse.reshape(-1)[codes], categories=categories)


class _CellAddresses:
    """A read-only integer view of an object array's cell pointers (numpy refuses ``view``
    on references); the view keeps this holder, and so the cells, alive."""

    def __init__(self, cells: np.ndarray):
        self.cells = cells
        self.__array_interface__ = {
            "shape": cells.shape,
            "typestr": np.dtype(np.intp).str,
            "data": (cells.__array_interface__["data"][0], True),
            "version": 3,
        }


def factorize_text(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of an object array of str, by the cells' addresses first: pandas'
    parser gives equal cells of one chunk one object, so hashing addresses and then the few
    distinct objects' texts is several times faster than hashing every cell's text."""
    import pandas as pd

    if cells.ndim != 1 or not cells.flags.c_contiguous or len(cells) == 0:
        return pd.factorize(cells)
    addresses = np.asarray(_CellAddresses(cells))
    starts = np.flatnonzero(np.concatenate(([True], addresses[1:] != addresses[:-1])))
    if 8 * len(starts) <= len(cells):  # runs of one object (a column of one value): one cell each
        run_codes, uniques = factorize_text(cells[starts])
        return np.repeat(run_codes, np.diff(np.append(starts, len(cells)))), uniques
    object_codes, distinct_addresses = pd.factorize(addresses)
    if 2 * len(distinct_addresses) > len(cells):
        return pd.factorize(cells)  # mostly distinct texts: hashing them once is cheaper
    first = np.empty(len(distinct_addresses), dtype=np.intp)
    first[object_codes[::-1]] = np.arange(len(cells) - 1, -1, -1)  # each object's first cell
    objects = cells[first]
    if not all(type(text) is str for text in objects):
        return pd.factorize(cells)  # NaN or other cells: pandas' own missing-value rules
    text_codes, uniques = pd.factorize(objects)
    return text_codes[object_codes], uniques


def _suspect_rows(frame, header: list[str], layout: str) -> np.ndarray:
    """Rows that may break a rule (checked on whole columns); any sends the file to _judged."""
    suspect = _text_mask(frame["api"], lambda text: text == "")
    if layout == "v1":
        status = frame["status"]
        ok = _text_mask(status, lambda text: text == STATUS_OK)
        failed = _text_mask(status, lambda text: text == STATUS_FAILED)
        has_error = _text_mask(frame["error_type"], bool) | _text_mask(frame["error"], bool)
        suspect |= _text_mask(frame["schema_version"], lambda text: text != SCHEMA_VERSION)
        suspect |= ~(ok | failed) | (ok & has_error) | (failed & ~has_error)
        success = ok
    else:
        success = np.ones(len(frame), dtype=bool)
    metrics = {name: frame[name].to_numpy(dtype=np.float64) for name in NUMERIC_COLUMNS}
    suspect |= success & bad_metrics(metrics)
    for name in header:
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is not None and name in frame.columns:
            suspect |= bad_optional(column, frame[name])
    return suspect


def _text_mask(values, predicate) -> np.ndarray:
    """``predicate`` of every cell of a categorical text column, asked once per category."""
    categories = values.cat.categories.tolist()
    answers = np.array([bool(predicate(text)) for text in categories] + [False])
    return answers[values.cat.codes.to_numpy()]


def bad_metrics(metrics) -> np.ndarray:
    """Rows whose metrics (name -> float64 array) may break metric_error; NaN counts."""
    values = [metrics[name] for name in NUMERIC_COLUMNS]
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values[0]) | (values[0] <= 0)
        for value in values[1:]:
            bad |= ~np.isfinite(value) | (value < 0)
    return bad


def bad_optional(column, values) -> np.ndarray:
    """Cells of an optional column (a pandas Series) that may break its rule (NaN: empty)."""
    if column.kind is Kind.TEXT:
        return np.zeros(len(values), dtype=bool)
    if column.kind is Kind.CHOICE:
        return _text_mask(values, lambda text: text not in ("", *column.choices))
    values = values.to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.isinf(values)
        fractional = ~np.isnan(values) & (values != np.floor(values))
        if column.kind is Kind.COUNT:
            return bad | (values < 1) | fractional
        if column.kind is Kind.NON_NEGATIVE_INT:
            return bad | (values < 0) | fractional
        if column.kind is Kind.FINITE:
            return bad
        if column.kind is Kind.POSITIVE:
            return bad | (values <= 0)
        return bad | (values < 0)


# ---------------------------------------------------------------- stored rows


def read_stored_rows(path) -> StoredRows:
    """A result CSV's header and complete rows, cells as written (for a sweep that resumes
    it and rewrites them byte for byte).  A last line without its line end (a write cut off
    by a kill or a full disk) is left out, as is any row whose cell count differs from the
    header's.  OSError and UnicodeDecodeError pass to the caller.  The file is opened once
    (a resumed sweep's CSV: tests/test_resume_opens.py counts)."""
    with OpenedOnce(path, input_limits.MAX_CSV_BYTES) as source:
        header = _read_header(source)
        if not header:
            return StoredRows((), ())
        frame = _unmarked(_parse(source, header, text=True, complete_lines=True))
    cells = frame.to_numpy(dtype=object)
    whole = cells[:, len(header)] == MARKER
    rows = tuple(
        dict(zip(header, (str(cell) for cell in row[: len(header)]), strict=True))
        for row in cells[whole]
    )
    return StoredRows(tuple(header), rows)
