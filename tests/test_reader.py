"""The reader's text columns: categoricals built as pandas would build them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fi_attn_bench.results.reader import factorize_text


@pytest.mark.parametrize(
    "cells",
    [
        ["ok", "failed", "ok", "é", "", "ok"] * 50,  # equal texts that are one object
        ["".join(["x", t])[1:] for t in ["ok", "failed", "ok", "é", "ok"] * 50],  # many objects
        [copy for copy in ("".join(["o", "k"]) for _ in range(3)) for _ in range(50)]
        + ["failed"] * 10,  # one text in a few objects, as pandas' chunks hand it out
        [f"case {i}" for i in range(300)] + ["case 1"] * 10,  # mostly distinct texts
        ["ok", float("nan"), "ok", None],  # missing cells keep pandas' rules
        ["ok"] * 40
        + [float("nan")] * 40
        + ["failed"] * 40
        + ["ok"] * 40,  # long runs of one object
        [],
    ],
)
def test_text_columns_factorize_exactly_as_pandas_does(cells):
    values = np.array(cells, dtype=object)
    codes, uniques = factorize_text(values)
    expected_codes, expected_uniques = pd.factorize(values)
    assert codes.tolist() == expected_codes.tolist()
    assert list(uniques) == list(expected_uniques)
    strided = factorize_text(values[::2])  # not contiguous
    assert strided[0].tolist() == pd.factorize(values[::2])[0].tolist()
