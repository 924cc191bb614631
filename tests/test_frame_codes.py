"""FrameView's codes of a column: the reader's float columns are coded from their numbers
(no Python float per row), with the same codes and values as the cells give one by one."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fi_attn_bench.summarizer.frames import FrameView, codes_of
from fi_attn_bench.summarizer.headtohead import _texts


def test_a_float_column_codes_like_its_cells_one_by_one():
    values = [16.0, math.nan, 64.0, 16.0, -0.0, 0.0, 1e-300, math.nan, 64.0]
    frame = pd.DataFrame({"page_size": np.array(values, dtype=np.float64)})
    codes, uniques = codes_of(frame, "page_size")
    expected_codes, expected = pd.factorize(np.array(values, dtype=object))
    assert codes.tolist() == expected_codes.tolist()
    assert uniques == list(expected) and all(type(value) is float for value in uniques)


def test_has_says_whether_the_column_exists_even_when_empty():
    view = FrameView(pd.DataFrame({"api": ["a"], "workspace": [math.nan]}))
    assert view.has("workspace") and not view.has("page_size")


def test_texts_of_a_categorical_column_give_empty_for_missing_cells():
    column = pd.Categorical.from_codes([0, -1, 1, 0], categories=["faster", "slower"])
    view = FrameView(pd.DataFrame({"api": ["a"] * 4, "paired_verdict": column}))
    assert _texts(view, "paired_verdict").tolist() == ["faster", "", "slower", "faster"]
    assert _texts(view, "winner") is None
