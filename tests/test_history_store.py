"""The store's size, its row blocks, the hash that answers a second add, and the upgrade of
a store written by the code before row blocks (store version 2, commit 5e3865d)."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from fi_attn_bench.history import command_line, reading
from fi_attn_bench.history.command_line import main
from fi_attn_bench.results import run_store
from fi_attn_bench.results.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"

# The tables of store version 2, as commit 5e3865d created them.
VERSION_2_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE,
    branch TEXT NOT NULL, started_utc TEXT NOT NULL, finished_utc TEXT NOT NULL,
    added_utc TEXT NOT NULL, source TEXT NOT NULL, metadata TEXT NOT NULL,
    columns TEXT NOT NULL, cases INTEGER NOT NULL);
CREATE TABLE cases (case_id INTEGER PRIMARY KEY, case_key TEXT NOT NULL UNIQUE,
    api TEXT NOT NULL, impl TEXT NOT NULL, fields TEXT NOT NULL);
CREATE TABLE results (run_seq INTEGER NOT NULL REFERENCES runs(run_seq),
    case_id INTEGER NOT NULL REFERENCES cases(case_id), status TEXT NOT NULL, time_ms REAL,
    sm_clock_mean_MHz REAL, power_capped_pct REAL, PRIMARY KEY (run_seq, case_id)) WITHOUT ROWID;
CREATE TABLE result_rows (run_seq INTEGER NOT NULL, case_id INTEGER NOT NULL,
    row TEXT NOT NULL, PRIMARY KEY (run_seq, case_id)) WITHOUT ROWID;
"""


def _run_copy(path: Path, index: int) -> Path:
    with open(REAL, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        header, rows = list(reader.fieldnames or []), list(reader)
    header += [] if "run_id" in header else ["run_id"]
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            row["run_id"] = f"run-{index:02d}"
            row["timestamp_utc"] = f"2026-01-01T{index:02d}:00:00Z"
            if row["time_ms"]:
                row["time_ms"] = repr(float(row["time_ms"]) * (1 + index / 1000))
            writer.writerow(row)
    return path


def _rows_as_written(path: Path) -> list[dict]:
    """Each row's cells as the CSV holds them, numbers as floats (the store keeps their value)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return [
            {name: _value(text) for name, text in row.items()} for row in csv.DictReader(handle)
        ]


def _value(text: str):
    try:
        return float(text)
    except ValueError:
        return text.strip()


def test_twenty_runs_of_real_output_take_under_twice_their_csv_bytes(tmp_path):
    store = tmp_path / "h.sqlite"
    paths = [_run_copy(tmp_path / f"{i}.csv", i) for i in range(20)]
    assert main(["add", *map(str, paths), "--store", str(store)]) == 0
    csv_bytes = sum(path.stat().st_size for path in paths)
    assert store.stat().st_size <= 2 * csv_bytes  # 5x as JSON rows (5e3865d)


def test_stored_rows_are_the_rows_the_reader_gives(tmp_path):
    store = tmp_path / "h.sqlite"
    path = _run_copy(tmp_path / "a.csv", 1)
    assert main(["add", str(path), "--store", str(store)]) == 0
    with RunStore.open(store, create=False) as opened:
        (run,) = opened.runs()
        stored = opened.run_rows(run.run_seq)
        newest = opened.newest_ok_rows()
    expected = _rows_as_written(path)
    key = lambda row: json.dumps({n: _value(v) for n, v in row.items()}, sort_keys=True)  # noqa: E731
    assert sorted(map(key, stored)) == sorted(map(key, expected))
    ok = [row for row in expected if row["status"] == "ok"]
    assert sorted(map(key, newest)) == sorted(map(key, ok))


def test_a_file_added_again_is_answered_from_its_hash_without_parsing(
    tmp_path, monkeypatch, capsys
):
    store = tmp_path / "h.sqlite"
    path = _run_copy(tmp_path / "a.csv", 1)
    assert main(["add", str(path), "--store", str(store)]) == 0
    capsys.readouterr()

    def parse(_path):
        raise AssertionError("a file the store holds was parsed again")

    monkeypatch.setattr(command_line, "runs_in_file", parse)
    assert main(["add", str(path), "--store", str(store)]) == 0
    said = capsys.readouterr().out
    assert "added 0 run(s), 0 result(s)" in said and "1 file(s) added before" in said


def test_a_changed_file_is_read_again(tmp_path):
    store = tmp_path / "h.sqlite"
    path = _run_copy(tmp_path / "a.csv", 1)
    assert main(["add", str(path), "--store", str(store)]) == 0
    _run_copy(path, 2)  # other bytes: another run
    assert main(["add", str(path), "--store", str(store)]) == 0
    with RunStore.open(store, create=False) as opened:
        assert len(opened.runs()) == 2


def _version_2_store(path: Path, csv_paths: list[Path]) -> list[list[dict]]:
    """A store as 5e3865d wrote it: its SQL, JSON rows; the rows stored per run."""
    connection = sqlite3.connect(path)
    connection.executescript(VERSION_2_SCHEMA)
    connection.execute("INSERT INTO meta VALUES ('store_version', '2')")
    stored = []
    for index, csv_path in enumerate(csv_paths, 1):
        (run,) = reading.runs_in_file(csv_path)
        connection.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                index,
                run.run_id,
                "main",
                run.started_utc,
                run.finished_utc,
                "",
                str(csv_path),
                json.dumps(dict(run.metadata)),
                json.dumps(list(run.columns)),
                len(run.results),
            ),
        )
        rows = run.block.rows()
        for result, row in zip(run.results, rows, strict=True):
            connection.execute(
                "INSERT OR IGNORE INTO cases (case_key, api, impl, fields) VALUES (?,?,?,?)",
                (result.case_key, result.api, result.impl, result.fields_json),
            )
            (case_id,) = connection.execute(
                "SELECT case_id FROM cases WHERE case_key=?", (result.case_key,)
            ).fetchone()
            connection.execute(
                "INSERT INTO results VALUES (?,?,?,?,?,?)",
                (
                    index,
                    case_id,
                    result.status,
                    result.time_ms,
                    result.sm_clock_mean_MHz,
                    result.power_capped_pct,
                ),
            )
            connection.execute(
                "INSERT INTO result_rows VALUES (?,?,?)", (index, case_id, json.dumps(row))
            )
        stored.append(rows)
    connection.commit()
    connection.close()
    return stored


def _by_key(rows):
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def test_a_version_2_store_reads_as_it_is_and_is_upgraded_by_the_next_add(tmp_path, capsys):
    store = tmp_path / "old.sqlite"
    stored = _version_2_store(store, [_run_copy(tmp_path / f"{i}.csv", i) for i in (1, 2)])
    with RunStore.open(store, create=False) as opened:  # read-only use: no upgrade
        assert [_by_key(opened.run_rows(seq)) for seq in (1, 2)] == [_by_key(r) for r in stored]
        assert len(opened.newest_ok_rows()) == 27
        assert len(opened.history().time_ms) == 54
    assert main(["detect", "--store", str(store)]) == 0
    capsys.readouterr()

    assert main(["add", str(_run_copy(tmp_path / "3.csv", 3)), "--store", str(store)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"upgraded history store {store} from version 2 to 3")
    with RunStore.open(store, create=False) as opened:
        assert [_by_key(opened.run_rows(seq)) for seq in (1, 2)] == [_by_key(r) for r in stored]
        assert len(opened.runs()) == 3
    tables = {row[0] for row in sqlite3.connect(store).execute("SELECT name FROM sqlite_master")}
    assert "result_rows" not in tables and "row_blocks" in tables
    assert (
        main(["baseline", "--store", str(store), "--branch", "", "--out", str(tmp_path / "b")]) == 0
    )


@pytest.mark.parametrize("rows", [1, 3])
def test_a_row_block_round_trips_its_cells(rows):
    block = run_store.RowBlock.from_rows(
        [{"api": "a,b", "x": "é\n", "time_ms": f"{i}.5"} for i in range(rows)]
    )
    case_ids, back = run_store.RowBlock.decode(*block.encode(list(range(rows))))
    assert case_ids.tolist() == list(range(rows))
    assert back.rows() == [{"api": "a,b", "x": "é\n", "time_ms": f"{i}.5"} for i in range(rows)]
