"""docs/SCHEMA.md is the page fi_attn_bench.results.schema_doc writes from the column registry."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from fi_attn_bench.results import schema, schema_doc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "SCHEMA.md")


def test_the_committed_page_is_the_generated_one():
    with open(PAGE, encoding="utf-8") as handle:
        committed = handle.read()
    assert committed == schema_doc.render(), (
        f"docs/SCHEMA.md is out of date: run `{schema_doc.COMMAND}`"
    )


def test_the_module_prints_the_page():
    done = subprocess.run(
        [sys.executable, "-m", "fi_attn_bench.results.schema_doc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == schema_doc.render()


def test_every_registered_column_and_script_field_is_on_the_page():
    page = schema_doc.render()
    for column in schema.OPTIONAL_COLUMNS:
        meaning = column.description.replace("|", "\\|")  # Markdown table cells escape it
        assert f"| `{column.name}` | {schema_doc.kind_text(column)} | {meaning} |" in page
    for name in schema.RESULT_COLUMNS:
        assert f"| `{name}` |" in page
    assert "| `bench_batch_mla.py` | `BatchMLAPagedAttentionWrapper` |" in page
    assert "`head_dim_ckv`" in page


def test_a_new_column_changes_the_page():
    extra = schema.Column(
        "notes", schema.Role.MEASUREMENT, schema.Kind.TEXT, "why a row deserves a second look"
    )
    page = schema_doc.render(columns=(*schema.OPTIONAL_COLUMNS, extra))
    assert page != schema_doc.render()
    assert "| `notes` | text | why a row deserves a second look |" in page
    changed = dataclasses.replace(schema.OPTIONAL_COLUMNS[0], description="something else")
    assert "something else" in schema_doc.render(columns=(changed, *schema.OPTIONAL_COLUMNS[1:]))


def test_choices_are_listed():
    timer = schema.OPTIONAL_COLUMN_BY_NAME["timer"]
    assert (
        schema_doc.kind_text(timer) == "one of `cupti`, `profiler`, `cuda_graph`, `events`, `wall`"
    )
