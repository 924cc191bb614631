"""The run store: one SQLite file, one transaction per run, a recorded store version.

A run's CSV rows are kept as row blocks (``results.run_rows.RowBlock``): per column, a text
column's distinct cells and one code per row, a numeric column's float64 values, compressed
with zlib; a 200,000-case run takes a few bytes a row where its JSON rows took 2 KB.  The SHA-256 of every
file added is recorded, so adding a file again is answered from its hash, before it is parsed.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fi_attn_bench.results.case_identity import case_identity
from fi_attn_bench.results.run_rows import CaseResult, ResultColumns, RowBlock
from fi_attn_bench.results.schema import STATUS_OK

STORE_VERSION = 3  # 3: rows in blocks, files by hash; 2: cases keyed by ``case_identity``
# (1: JSON that kept empty fields)
DEFAULT_STORE_NAME = "fi-attn-history.sqlite"
LOCK_TIMEOUT_S = 5.0  # a second writer waits this long, then gives up with exit 2

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    branch TEXT NOT NULL,
    started_utc TEXT NOT NULL,
    finished_utc TEXT NOT NULL,
    added_utc TEXT NOT NULL,
    source TEXT NOT NULL,
    metadata TEXT NOT NULL,
    columns TEXT NOT NULL,
    cases INTEGER NOT NULL
);
CREATE TABLE cases (
    case_id INTEGER PRIMARY KEY,
    case_key TEXT NOT NULL UNIQUE,
    api TEXT NOT NULL,
    impl TEXT NOT NULL,
    fields TEXT NOT NULL
);
CREATE TABLE results (
    run_seq INTEGER NOT NULL REFERENCES runs(run_seq),
    case_id INTEGER NOT NULL REFERENCES cases(case_id),
    status TEXT NOT NULL,
    time_ms REAL,
    sm_clock_mean_MHz REAL,
    power_capped_pct REAL,
    PRIMARY KEY (run_seq, case_id)
) WITHOUT ROWID;
CREATE TABLE row_blocks (
    run_seq INTEGER NOT NULL,
    block INTEGER NOT NULL,
    layout BLOB NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_seq, block)
) WITHOUT ROWID;
CREATE TABLE files (
    sha256 TEXT PRIMARY KEY,
    added_utc TEXT NOT NULL
) WITHOUT ROWID;
"""
# What version 3 adds to a version-2 store (its rows then move into blocks).
_VERSION_3_TABLES = _SCHEMA[_SCHEMA.index("CREATE TABLE row_blocks") :]


@dataclass(frozen=True)
class ParsedRun:
    """The rows of one benchmark invocation and what they say about it."""

    run_id: str
    source: str
    metadata: tuple[tuple[str, str], ...]  # (column, value) from RUN_METADATA_COLUMNS
    started_utc: str
    finished_utc: str
    columns: tuple[str, ...]  # the CSV header, for writing the run back
    results: Sequence[CaseResult]  # a tuple, or a ResultSequence over columns
    block: RowBlock | None = None  # the rows of ``results``, in order (None: their row_json)

    def meta(self, name: str) -> str:
        return dict(self.metadata).get(name, "")


class StoreError(Exception):
    """The store cannot be used: newer, corrupt, locked or missing (exit 2)."""


def _decoded(layout: bytes, data: bytes, run_seq: int) -> tuple[np.ndarray, RowBlock]:
    """A stored row block; one that does not decode is a corrupt store, not a traceback."""
    try:
        return RowBlock.decode(layout, data)
    except (zlib.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise StoreError(
            f"a row block of run {run_seq} is damaged (tampered?): {type(exc).__name__}: {exc}"
        ) from None


@dataclass(frozen=True)
class RunInfo:
    """One stored run's identity and conditions."""

    run_seq: int
    run_id: str
    branch: str
    started_utc: str
    finished_utc: str
    metadata: dict
    columns: tuple[str, ...]
    cases: int

    @property
    def commit(self) -> str:
        return self.metadata.get("git_commit", "")

    @property
    def device(self) -> str:
        return self.metadata.get("device", "")


@dataclass(frozen=True)
class CaseInfo:
    case_id: int
    case_key: str
    api: str
    impl: str
    fields: dict


@dataclass(frozen=True)
class History:
    """Every stored result as aligned arrays: one row per (run, case) pair."""

    runs: tuple[RunInfo, ...]  # in time order
    cases: tuple[CaseInfo, ...]
    run_index: np.ndarray  # position in ``runs`` of each result
    case_index: np.ndarray  # position in ``cases``
    time_ms: np.ndarray  # NaN for failed cases
    clock_MHz: np.ndarray  # NaN where unknown
    power_capped_pct: np.ndarray

    def log_time_series(self, case_keys: Sequence | None = None) -> dict[tuple, np.ndarray]:
        """Per (device, case position), the log times of its timed results in run order;
        with ``case_keys`` (one per case position), per (device, key): cases that share a key
        share a series."""
        timed = np.flatnonzero(self.time_ms > 0)  # a failed case has no time
        timed = timed[np.argsort(self.run_index[timed], kind="stable")]
        devices = np.array([run.device for run in self.runs], dtype=object)[self.run_index[timed]]
        cases = self.case_index[timed].tolist()
        keys = cases if case_keys is None else [case_keys[case] for case in cases]
        series: dict[tuple, list[float]] = {}
        for device, key, time_ms in zip(
            devices.tolist(), keys, self.time_ms[timed].tolist(), strict=True
        ):
            series.setdefault((device, key), []).append(time_ms)
        return {key: np.log(values) for key, values in series.items()}


@dataclass(frozen=True)
class StoreUpgrade:
    """What opening an older store for writing changed."""

    from_version: int
    to_version: int
    joined_cases: int  # cases the old keys had split in two, now one

    def message(self, path) -> str:
        return (
            f"upgraded history store {path} from version {self.from_version} to "
            f"{self.to_version} ({self.joined_cases} case(s) that older keys split are joined)"
        )


class RunStore:
    """A SQLite store; open with ``RunStore.open`` and use as a context manager."""

    def __init__(self, connection: sqlite3.Connection, path: Path):
        self.connection = connection
        self.path = path

    @classmethod
    def open(cls, path: str | Path, *, create: bool) -> RunStore:
        path = Path(path)
        if not path.exists() and not create:
            raise StoreError(f"no history store at {path} (create one with 'add')")
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
            store = cls(connection, path)
            store._check_or_create()
        except sqlite3.OperationalError as exc:
            raise StoreError(_sqlite_message(path, exc)) from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} is not a usable history store: {exc}") from None
        return store

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.connection.close()

    def _check_or_create(self) -> None:
        if not self._tables():
            self._create()
        tables = self._tables()
        if "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite file but not a history store")
        row = self.connection.execute("SELECT value FROM meta WHERE key='store_version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else None
        if version is None:
            raise StoreError(f"{self.path} records no store version; not a history store")
        if version > STORE_VERSION:
            raise StoreError(
                f"{self.path} is history store version {version}; this fi-attn-bench reads "
                f"up to {STORE_VERSION} (upgrade fi-attn-bench)"
            )

    def _tables(self) -> set[str]:
        rows = self.connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {row[0] for row in rows}

    def _create(self) -> None:
        with self.transaction():
            if self._tables():  # another writer created it since we looked
                return
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self.connection.execute(statement)
            self.connection.execute(
                "INSERT INTO meta VALUES ('store_version', ?)", (str(STORE_VERSION),)
            )

    def transaction(self):
        return _Transaction(self.connection, self.path)

    def add_run(self, run: ParsedRun, branch: str) -> int:
        """Store one run's results in one transaction; how many were new.  A run written as
        several files (``bench_all.py``: one CSV per API; shards) is one run: a later file of
        it adds its cases to the stored run, and a case the run holds already is kept as is."""
        with self.transaction():
            self._upgrade_case_keys()  # a no-op once upgrade() ran; a caller may skip it
            known = self.connection.execute(
                "SELECT run_seq FROM runs WHERE run_id=?", (run.run_id,)
            ).fetchone()
            run_seq = known[0] if known else self._insert_run(run, branch)
            columns = ResultColumns.of(run.results)
            case_ids = self._case_ids(run)
            stored = {
                case_id
                for (case_id,) in self.connection.execute(
                    "SELECT case_id FROM results WHERE run_seq=?", (run_seq,)
                )
            }
            new = []
            for position, key in enumerate(columns.case_keys):
                if case_ids[key] not in stored:
                    stored.add(case_ids[key])
                    new.append(position)
            if not new:
                return 0
            new_ids = [case_ids[columns.case_keys[position]] for position in new]
            self.connection.executemany(
                "INSERT INTO results VALUES (?,?,?,?,?,?)",
                (
                    (
                        run_seq,
                        case_id,
                        columns.statuses[position],
                        columns.time_ms[position],
                        columns.sm_clock_mean_MHz[position],
                        columns.power_capped_pct[position],
                    )
                    for case_id, position in zip(new_ids, new, strict=True)
                ),
            )
            if run.block is None:
                block = RowBlock.from_rows([json.loads(run.results[i].row_json) for i in new])
            elif len(new) == len(run.block):
                block = run.block  # every row is new: no copy
            else:
                block = run.block.take(np.array(new, dtype=np.intp))
            self._insert_block(run_seq, np.array(new_ids, dtype=np.int64), block)
            if known:
                self._extend_run(run_seq, run, len(new))
        return len(new)

    def _insert_block(self, run_seq: int, case_ids: np.ndarray, block: RowBlock) -> None:
        (count,) = self.connection.execute(
            "SELECT COUNT(*) FROM row_blocks WHERE run_seq=?", (run_seq,)
        ).fetchone()
        layout, data = block.encode(case_ids)
        self.connection.execute(
            "INSERT INTO row_blocks VALUES (?,?,?,?)", (run_seq, count, layout, data)
        )

    def has_file(self, digest: str) -> bool:
        """Whether a file of this SHA-256 was added whole (``record_file``)."""
        if "files" not in self._tables():
            return False  # an older store, not upgraded yet
        return bool(self._query("SELECT 1 FROM files WHERE sha256=?", (digest,)))

    def record_file(self, digest: str) -> None:
        """Remember a file whose every run is stored, so adding it again parses nothing."""
        with self.transaction():
            self.connection.execute(
                "INSERT OR IGNORE INTO files VALUES (?,?)", (digest, _now_utc())
            )

    def upgrade(self) -> StoreUpgrade | None:
        """An older store brought to this version in one transaction (None: already there)."""
        with self.transaction():
            return self._upgrade_case_keys()

    def _upgrade_case_keys(self) -> StoreUpgrade | None:
        """An older store brought to this version inside the writer's transaction: a
        version-1 store rekeyed by ``case_identity`` (a case written both ways keeps its
        first id and all its runs), a version-2 store's JSON rows moved into row blocks."""
        (version,) = self.connection.execute(
            "SELECT value FROM meta WHERE key='store_version'"
        ).fetchone()
        if int(version) >= STORE_VERSION:
            return None
        joined = self._rekey_cases() if int(version) < 2 else 0
        if "result_rows" in self._tables():
            self._rows_into_blocks()
        self.connection.execute(
            "UPDATE meta SET value=? WHERE key='store_version'", (str(STORE_VERSION),)
        )
        return StoreUpgrade(int(version), STORE_VERSION, joined)

    def _rekey_cases(self) -> int:
        joined = 0
        first_id: dict[str, int] = {}
        moved: dict[int, int] = {}
        for case_id, api, fields in self.connection.execute(
            "SELECT case_id, api, fields FROM cases ORDER BY case_id"
        ).fetchall():
            survivor = first_id.setdefault(case_identity(api, json.loads(fields)), case_id)
            if survivor != case_id:
                joined += 1
                moved[case_id] = survivor
                for table in ("results", "result_rows"):
                    if table not in self._tables():
                        continue
                    self.connection.execute(
                        f"UPDATE OR IGNORE {table} SET case_id=? WHERE case_id=?",
                        (survivor, case_id),
                    )
                    self.connection.execute(f"DELETE FROM {table} WHERE case_id=?", (case_id,))
                self.connection.execute("DELETE FROM cases WHERE case_id=?", (case_id,))
        if moved and "row_blocks" in self._tables():
            self._rekey_blocks(moved)
        self.connection.execute("UPDATE cases SET case_key = 'upgrading:' || case_id")
        self.connection.executemany(
            "UPDATE cases SET case_key=? WHERE case_id=?", list(first_id.items())
        )
        return joined

    def _rekey_blocks(self, moved: dict[int, int]) -> None:
        """Row blocks' case ids joined as ``moved`` says (old id -> surviving id)."""
        for run_seq, block, layout, data in self.connection.execute(
            "SELECT run_seq, block, layout, data FROM row_blocks"
        ).fetchall():
            case_ids, rows = _decoded(layout, data, run_seq)
            joined = np.array([moved.get(i, i) for i in case_ids.tolist()], dtype=np.int64)
            if np.array_equal(joined, case_ids):
                continue
            layout, data = rows.encode(joined)
            self.connection.execute(
                "UPDATE row_blocks SET layout=?, data=? WHERE run_seq=? AND block=?",
                (layout, data, run_seq, block),
            )

    def _rows_into_blocks(self) -> None:
        """A version-2 store's JSON rows as one row block per run; the JSON table dropped."""
        for statement in _VERSION_3_TABLES.split(";"):
            if statement.strip():
                self.connection.execute(
                    statement.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")
                )
        runs = [
            seq for (seq,) in self.connection.execute("SELECT DISTINCT run_seq FROM result_rows")
        ]
        for run_seq in runs:
            stored = self.connection.execute(
                "SELECT case_id, row FROM result_rows WHERE run_seq=? ORDER BY case_id", (run_seq,)
            ).fetchall()
            case_ids = np.array([case_id for case_id, _ in stored], dtype=np.int64)
            self._insert_block(
                run_seq, case_ids, RowBlock.from_rows([json.loads(r) for _, r in stored])
            )
        self.connection.execute("DROP TABLE result_rows")

    def _insert_run(self, run: ParsedRun, branch: str) -> int:
        cursor = self.connection.execute(
            "INSERT INTO runs (run_id, branch, started_utc, finished_utc, added_utc, source,"
            " metadata, columns, cases) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                run.run_id,
                branch,
                run.started_utc,
                run.finished_utc,
                _now_utc(),
                run.source,
                json.dumps(dict(run.metadata), sort_keys=True),
                json.dumps(list(run.columns)),
                len(run.results),
            ),
        )
        return int(cursor.lastrowid)

    def _extend_run(self, run_seq: int, run: ParsedRun, added: int) -> None:
        """A stored run's span, columns and metadata widened by another file of it."""
        started, finished, metadata, columns = self.connection.execute(
            "SELECT started_utc, finished_utc, metadata, columns FROM runs WHERE run_seq=?",
            (run_seq,),
        ).fetchone()
        stamps = [
            stamp for stamp in (started, finished, run.started_utc, run.finished_utc) if stamp
        ]
        names = json.loads(columns)
        names += [name for name in run.columns if name not in names]
        merged = {**dict(run.metadata), **json.loads(metadata)}  # the first file's values win
        self.connection.execute(
            "UPDATE runs SET started_utc=?, finished_utc=?, metadata=?, columns=?,"
            " cases=cases+? WHERE run_seq=?",
            (
                min(stamps, default=""),
                max(stamps, default=""),
                json.dumps(merged, sort_keys=True),
                json.dumps(names),
                added,
                run_seq,
            ),
        )

    def _case_ids(self, run: ParsedRun) -> dict[str, int]:
        """The store's id of every case of the run, the new ones inserted first (their
        fields JSON is made for them alone)."""
        columns = ResultColumns.of(run.results)
        ids = self._known_case_ids(columns.case_keys)
        missing: dict[str, int] = {}
        for position, key in enumerate(columns.case_keys):
            if key not in ids:
                missing.setdefault(key, position)
        if missing:
            self.connection.executemany(
                "INSERT INTO cases (case_key, api, impl, fields) VALUES (?,?,?,?)",
                (
                    (key, columns.apis[at], columns.impls[at], columns.fields_json[at])
                    for key, at in missing.items()
                ),
            )
            ids.update(self._known_case_ids(list(missing)))
        return ids

    def _known_case_ids(self, keys: Sequence[str]) -> dict[str, int]:
        ids: dict[str, int] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for case_id, key in self.connection.execute(
                f"SELECT case_id, case_key FROM cases WHERE case_key IN ({marks})", chunk
            ):
                ids[key] = case_id
        return ids

    def runs(self) -> tuple[RunInfo, ...]:
        """Every run, oldest first (by start time, then by when it was added)."""
        rows = self._query(
            "SELECT run_seq, run_id, branch, started_utc, finished_utc, metadata, columns, cases"
            " FROM runs ORDER BY started_utc, run_seq"
        )
        return tuple(
            RunInfo(seq, rid, branch, start, end, json.loads(meta), tuple(json.loads(cols)), n)
            for seq, rid, branch, start, end, meta, cols, n in rows
        )

    def cases(self) -> tuple[CaseInfo, ...]:
        rows = self._query(
            "SELECT case_id, case_key, api, impl, fields FROM cases ORDER BY case_id"
        )
        return tuple(
            CaseInfo(cid, key, api, impl, json.loads(f)) for cid, key, api, impl, f in rows
        )

    def history(self) -> History:
        """All results as arrays (one query; fast enough for 100k results)."""
        runs, cases = self.runs(), self.cases()
        run_pos = {run.run_seq: index for index, run in enumerate(runs)}
        case_pos = {case.case_id: index for index, case in enumerate(cases)}
        rows = self._query(
            "SELECT run_seq, case_id, time_ms, sm_clock_mean_MHz, power_capped_pct FROM results"
        )
        data = np.array(
            [
                (run_pos[r[0]], case_pos[r[1]], *(np.nan if v is None else v for v in r[2:]))
                for r in rows
            ],
            dtype=np.float64,
        ).reshape(-1, 5)
        return History(
            runs=runs,
            cases=cases,
            run_index=data[:, 0].astype(np.int64),
            case_index=data[:, 1].astype(np.int64),
            time_ms=data[:, 2],
            clock_MHz=data[:, 3],
            power_capped_pct=data[:, 4],
        )

    def run_rows(self, run_seq: int) -> list[dict]:
        """The CSV rows of one run as they were added."""
        return list(self.run_case_rows(run_seq).values())

    def run_case_rows(self, run_seq: int) -> dict[int, dict]:
        """The CSV rows of one run by the store's case id (one identity for every run)."""
        if "result_rows" in self._tables():  # a version-2 store, read without upgrading it
            rows = self._query(
                "SELECT case_id, row FROM result_rows WHERE run_seq=? ORDER BY case_id", (run_seq,)
            )
            return {case_id: json.loads(row) for case_id, row in rows}
        found: dict[int, dict] = {}
        for layout, data in self._query(
            "SELECT layout, data FROM row_blocks WHERE run_seq=? ORDER BY block", (run_seq,)
        ):
            case_ids, block = _decoded(layout, data, run_seq)
            for case_id, row in zip(case_ids.tolist(), block.rows(), strict=True):
                found.setdefault(case_id, row)
        return dict(sorted(found.items()))

    def newest_ok_rows(self) -> list[dict]:
        """Per case, the CSV row of its newest run (by start time) where it was ok."""
        if "result_rows" in self._tables():  # a version-2 store, read without upgrading it
            rows = self._query(
                "SELECT row FROM (SELECT rr.row, ROW_NUMBER() OVER (PARTITION BY rr.case_id"
                " ORDER BY runs.started_utc DESC, runs.run_seq DESC) AS newest"
                " FROM result_rows rr"
                " JOIN results r ON r.run_seq = rr.run_seq AND r.case_id = rr.case_id"
                " JOIN runs ON runs.run_seq = r.run_seq WHERE r.status = ?)"
                " WHERE newest = 1",
                (STATUS_OK,),
            )
            return [json.loads(row[0]) for row in rows]
        newest = self._query(
            "SELECT run_seq, case_id FROM (SELECT r.run_seq, r.case_id, ROW_NUMBER() OVER"
            " (PARTITION BY r.case_id ORDER BY runs.started_utc DESC, runs.run_seq DESC)"
            " AS newest FROM results r JOIN runs ON runs.run_seq = r.run_seq"
            " WHERE r.status = ?) WHERE newest = 1",
            (STATUS_OK,),
        )
        wanted: dict[int, set[int]] = {}
        for run_seq, case_id in newest:
            wanted.setdefault(run_seq, set()).add(case_id)
        found = []
        for run_seq, cases in wanted.items():
            rows = self.run_case_rows(run_seq)
            found += [rows[case_id] for case_id in sorted(cases) if case_id in rows]
        return found

    def _query(self, sql: str, parameters: Sequence = ()) -> list[tuple]:
        try:
            return self.connection.execute(sql, parameters).fetchall()
        except sqlite3.OperationalError as exc:
            raise StoreError(_sqlite_message(self.path, exc)) from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable history store: {exc}") from None


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error: a run is stored whole or not."""

    def __init__(self, connection: sqlite3.Connection, path: Path):
        self.connection = connection
        self.path = path

    def __enter__(self):
        try:
            self.connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(_sqlite_message(self.path, exc)) from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable history store: {exc}") from None
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            try:
                self.connection.execute("COMMIT")
                return
            except sqlite3.OperationalError as error:
                self._rollback()
                raise StoreError(_sqlite_message(self.path, error)) from None
        self._rollback()
        if isinstance(exc, sqlite3.Error):  # a full disk, a read-only file: one line, its cause
            raise StoreError(_sqlite_message(self.path, exc)) from None

    def _rollback(self) -> None:
        """Undo the transaction, if SQLite has not already (it does after a full disk, and
        a second ROLLBACK would replace the cause with "no transaction is active")."""
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")


def _now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sqlite_message(path: Path, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"history store {path} is locked by another writer (waited {LOCK_TIMEOUT_S:g} s)"
    return f"cannot use history store {path}: {text}"
