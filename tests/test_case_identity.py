"""One case identity for files, runs and the history store (results/case_identity.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fi_attn_bench.history import reading
from fi_attn_bench.history.command_line import main
from fi_attn_bench.results import run_store
from fi_attn_bench.results.case_identity import case_identities, case_identity
from fi_attn_bench.summarizer.run_noise import read_run_noise

DECODE = Path(__file__).parent / "fixtures" / "real_csv" / "h100_decode_default.csv"


def test_a_column_a_file_lacks_reads_as_empty_and_a_default_as_its_value():
    same = [
        case_identity("decode", {"batch_size": "4"}),
        case_identity("decode", {"batch_size": "4", "causal": ""}),
        case_identity("decode", {"batch_size": "4", "impl": "flashinfer", "workload": ""}),
        case_identity("decode", {"batch_size": "4", "impl": ""}),
    ]
    assert len(set(same)) == 1
    others = [
        case_identity("decode", {"batch_size": "4", "impl": "fa3"}),
        case_identity("decode", {"batch_size": "8"}),
        case_identity("prefill", {"batch_size": "4"}),
        case_identity("decode", {"batch_size": "4", "causal": "1"}),
    ]
    assert len({same[0], *others}) == 5


def test_many_rows_at_once_get_the_per_row_identity():
    rng = np.random.default_rng(7)
    rows = 300
    names = ["batch_size", "causal", "impl", "workload", "seq_len"]
    choices = {
        "batch_size": ["1", "4", "", "16"],
        "causal": ["", "0", "1"],
        "impl": ["", "flashinfer", "fa3"],
        "workload": ["", "sharegpt"],
        "seq_len": ["", "512", "4096"],
    }
    columns = {name: rng.choice(choices[name], size=rows).tolist() for name in names[:-1]}
    api = rng.choice(["decode", "prefill_ragged"], size=rows).tolist()
    expected = [
        case_identity(api[i], {name: values[i] for name, values in columns.items()})
        for i in range(rows)
    ]
    assert case_identities(api, columns) == expected
    assert len(set(expected)) > 20  # the draw covers many distinct cases


def _old_json_key(api: str, fields: dict) -> str:
    """How store version 1 keyed a case: every field the file had, empty ones too."""
    return json.dumps({"api": api, **fields}, sort_keys=True)


def _old_json_keys(apis, fields: dict) -> list[str]:
    """_old_json_key of each row of these columns (the history reads a file by column)."""
    return [
        _old_json_key(api, {name: cells[row] for name, cells in fields.items()})
        for row, api in enumerate(apis)
    ]


def _write(path: Path, hour: int, **extra: str) -> Path:
    frame = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    frame["timestamp_utc"] = f"2026-01-01T{hour:02d}:00:00Z"
    frame["git_commit"] = f"{hour:040x}"
    for name, value in extra.items():
        frame[name] = value
    frame.to_csv(path, index=False)
    return path


def _cases_and_results(store: Path) -> tuple[int, list[int], str]:
    with sqlite3.connect(store) as connection:
        cases = connection.execute("SELECT COUNT(*) FROM cases").fetchone()[0]
        per_case = [
            count
            for (count,) in connection.execute(
                "SELECT COUNT(*) FROM results GROUP BY case_id ORDER BY case_id"
            )
        ]
        (version,) = connection.execute(
            "SELECT value FROM meta WHERE key='store_version'"
        ).fetchone()
    return cases, per_case, version


def test_a_version_1_store_is_rekeyed_on_its_next_add_and_each_case_keeps_all_its_runs(
    tmp_path, monkeypatch, capsys
):
    """Version 1 split a case when a newer harness added a case column, left empty; the
    next add under version 2 joins the two halves of each history."""
    store = tmp_path / "h.sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(run_store, "STORE_VERSION", 1)
        patch.setattr(reading, "case_identities", _old_json_keys)
        assert main(["add", str(_write(tmp_path / "a.csv", 1)), "--store", str(store)]) == 0
        newer = _write(tmp_path / "b.csv", 2, causal="")
        assert main(["add", str(newer), "--store", str(store)]) == 0
    assert _cases_and_results(store) == (54, [1] * 54, "1")
    capsys.readouterr()

    assert main(["add", str(_write(tmp_path / "c.csv", 3)), "--store", str(store)]) == 0
    assert _cases_and_results(store) == (27, [3] * 27, str(run_store.STORE_VERSION))
    said = capsys.readouterr().out.splitlines()
    assert said[0] == (
        f"upgraded history store {store} from version 1 to {run_store.STORE_VERSION}"
        " (27 case(s) that older keys split are joined)"
    )
    assert said[1].startswith("added 1 run(s), 27 result(s)")
    assert main(["detect", "--store", str(store)]) == 0


@pytest.mark.parametrize("extra", [{}, {"causal": ""}, {"impl": "flashinfer"}])
def test_a_version_2_store_matches_a_case_whichever_columns_its_file_had(tmp_path, extra):
    store = tmp_path / "h.sqlite"
    assert main(["add", str(_write(tmp_path / "a.csv", 1)), "--store", str(store)]) == 0
    assert main(["add", str(_write(tmp_path / "b.csv", 2, **extra)), "--store", str(store)]) == 0
    assert _cases_and_results(store)[:2] == (27, [2] * 27)


def test_noise_from_a_version_1_store_joins_the_two_halves_of_a_split_case(tmp_path, monkeypatch):
    """Read-only use never rekeys the store: --noise-from itself joins what version 1 split
    (6 + 6 runs: neither half alone reaches the 10 runs a noise estimate needs)."""
    store = tmp_path / "h.sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(run_store, "STORE_VERSION", 1)
        patch.setattr(reading, "case_identities", _old_json_keys)
        for hour in range(1, 13):
            extra = {"causal": ""} if hour % 2 else {}
            path = _write(tmp_path / f"{hour}.csv", hour, **extra)
            assert main(["add", str(path), "--store", str(store)]) == 0
    assert _cases_and_results(store)[0] == 54
    noise = read_run_noise(store)
    assert len(noise.by_case) == 27
    assert _cases_and_results(store)[2] == "1"  # reading did not write
