"""The pandas-free reader's shortcuts give what the plain computation gives."""

from __future__ import annotations

import numpy as np

from fi_attn_bench.results.schema import OPTIONAL_COLUMN_BY_NAME
from fi_attn_bench.summarizer import scan
from fi_attn_bench.summarizer.loading import float_or_nan


def _unique(words):
    distinct, codes = np.unique(words, return_inverse=True)
    return distinct, codes.reshape(-1)


def test_word_codes_agree_with_np_unique_whatever_the_sample_holds():
    rng = np.random.default_rng(3)
    rows = 3 * scan.SAMPLE_ROWS
    few = rng.integers(0, 9, rows).astype(np.uint64) << np.uint64(40)
    late = few.copy()
    late[-1] = np.uint64(7)  # a value the sampled rows never show, sorting first
    late_high = few.copy()
    late_high[scan.SAMPLE_ROWS + 5] = np.uint64((1 << 64) - 1)  # one sorting last
    many = rng.integers(0, 10_000, rows).astype(np.uint64)  # more than MAX_SAMPLED
    constant = np.full(rows, np.uint64(12345))
    for words in (few, late, late_high, many, constant, few[:10]):
        distinct, codes = scan._word_codes(words)
        expected_distinct, expected_codes = _unique(words)
        assert distinct.tolist() == expected_distinct.tolist()
        assert np.asarray(codes).reshape(-1).tolist() == expected_codes.tolist()


def _table(tmp_path, cells: list[str], name: str) -> scan.ScannedTable:
    """A one-column-of-interest table, located as scan_table locates it."""
    body = "".join(f"a,{cell},z\n" for cell in cells)
    path = tmp_path / "t.csv"
    path.write_bytes(f"x,{name},y\n{body}".encode())
    buffer = path.read_bytes()
    header_end = buffer.find(b"\n") + 1
    starts, ends, _ = scan._locate(buffer, header_end, 3, [0, 1, 2])
    return scan.ScannedTable(str(path), ["x", name, "y"], False, buffer, starts, ends)


TRICKY = ["1e-3", "1_0", " 7 ", "+5", "-0.0", "1e400", "nan", "inf", "0x10", "12.", ".25"]
TRICKY += ["1.34761704e-05", "3", "", "9" * 17, "0.30000000000000004", "x", "1E5"]


def test_python_fallback_is_float_of_each_cell(tmp_path):
    table = _table(tmp_path, TRICKY, "max_abs_err")
    values = table.floats("max_abs_err")
    expected = [float_or_nan(cell) for cell in TRICKY]
    assert [v if v == v else "nan" for v in values.tolist()] == [
        v if v == v else "nan" for v in expected
    ]


def test_screening_flags_what_the_rule_flags_and_nothing_in_an_empty_column(tmp_path):
    column = OPTIONAL_COLUMN_BY_NAME["max_abs_err"]
    table = _table(tmp_path, TRICKY, column.name)
    values = np.array([float_or_nan(cell) for cell in TRICKY])
    lengths = np.array([len(cell) for cell in TRICKY])
    from fi_attn_bench.summarizer.loading import bad_optional

    expected = (bad_optional(column, values) | np.isnan(values)) & (lengths > 0)
    assert table.bad_numbers(column).tolist() == expected.tolist()
    assert expected.any() and not expected.all()
    empty = _table(tmp_path, [""] * 40, column.name)
    assert not empty.bad_numbers(column).any() and len(empty.bad_numbers(column)) == 40
