"""benchmarks/fuzz_summarizer.py runs the fuzz module's properties as they are today."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.fuzz_summarizer import MODULE, ROOT, examples_per_property, properties


def test_properties_are_the_given_tests_of_a_module(tmp_path):
    module = tmp_path / "test_module.py"
    module.write_text(
        "from hypothesis import given, settings, strategies as st\n"
        "FUZZ = settings()\n"
        "@FUZZ\n"
        "@given(st.integers())\n"
        "def test_a(x):\n"
        "    pass\n"
        "def test_plain():\n"
        "    pass\n"
        "@given(st.text())\n"
        "def helper(x):\n"
        "    pass\n"
        "@settings(max_examples=3)\n"
        "def test_settings_only():\n"
        "    pass\n",
        encoding="utf-8",
    )
    assert properties(module) == ["test_a"]


def test_every_property_it_runs_is_collected_by_pytest():
    names = properties()
    assert names
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + [f"{MODULE}::{name}" for name in names],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{len(names)} test" in result.stdout


def test_examples_are_split_by_weight_with_one_at_least():
    split = examples_per_property(["test_regression_mode_never_crashes", "test_b"], 160)
    assert split == {"test_regression_mode_never_crashes": 60, "test_b": 100}
    assert examples_per_property(["test_b", "test_c"], 1) == {"test_b": 1, "test_c": 1}
