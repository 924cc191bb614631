"""docs/SCHEMA.md, written from the column registry (``python -m fi_attn_bench.results.schema_doc
> docs/SCHEMA.md``); tests/test_schema_doc.py fails when the committed page differs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence

from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    OPTIONAL_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    Column,
    Kind,
    Role,
)

COMMAND = "python -m fi_attn_bench.results.schema_doc > docs/SCHEMA.md"
BENCH_SCRIPTS = (
    "bench_batch_decode",
    "bench_batch_prefill_paged",
    "bench_batch_prefill_ragged",
    "bench_batch_mla",
)

# The result columns are fixed by the seed's schema, so the registry names them without prose.
RESULT_MEANINGS: Mapping[str, str] = {
    "schema_version": f"`{SCHEMA_VERSION}`",
    "api": "wrapper name, e.g. `BatchDecodeWithPagedKVCacheWrapper`",
    "status": "`ok` or `failed` (`legacy_inferred_ok` is given by the reader to old CSVs)",
    "time_ms": "median GPU time of one `run()`, ms",
    "bandwidth_GB_s": "`io_bytes / time_ms / 1e6` (decimal GB/s)",
    "tflops": "`flops / time_ms / 1e9`",
    "error_type": "exception type of a failed case (empty when ok)",
    "error": "why a case failed (empty when ok)",
}

ROLE_TITLES: Mapping[Role, str] = {
    Role.STATISTIC: "Statistics of the samples",
    Role.MEASUREMENT: "How the case was measured",
    Role.ENVIRONMENT: "Environment and run metadata",
    Role.CORRECTNESS: "Correctness check",
    Role.ROOFLINE: "Roofline",
    Role.PAIRED: "Head to head (rows of a non-baseline implementation)",
    Role.WORKLOAD: "Serving-shaped batches",
    Role.CONDITIONS: "Run conditions (read around the case, never inside a timed call)",
}

INTRO = """\
One row per case (per implementation, in a head-to-head run). Every column is defined once, in
`fi_attn_bench/results/schema.py` (re-exported by `benchmark_result.py`); the benchmark scripts
write with it and `summarize_results.py` reads and validates with it. A row is

    schema_version, api, <case parameters...>, status, time_ms, bandwidth_GB_s, tflops,
    error_type, error, <optional columns...>

Every column that is neither a result column nor a registered optional column is a *case
parameter*: with `api`, the case parameters identify a case, and a baseline and a candidate are
matched on them."""

CASE_NOTES = """\
Decode and paged prefill use `num_qo_heads = 32` and `num_kv_heads = 8 if head_dim == 64 else 4`;
prefill is causal; ragged prefill runs head dims 192/128 and 128/128; MLA is decode (one query
token) with `head_dim_ckv = 512`, `head_dim_kpe = 64`. A serving-shaped case
([SERVING.md](SERVING.md)) fills the length columns with its request count and mean lengths,
rounded, so filters and plots still work; its `workload` column names the batch."""

DERIVED = """\
I/O bytes count q, k, v (or the MLA caches) for the real token counts plus the output; causal
prefill FLOPs count only unmasked query-key pairs; ragged prefill uses `head_dim_qk` for QK and
`head_dim_vo` for PV; MLA counts `2·H·(2·ckv + kpe)` per query-key pair.

CSVs written by the original contest scripts (schema v1 without optional columns, and the four
legacy per-wrapper layouts) are read, and compare against new CSVs of the same cases."""


def kind_text(column: Column) -> str:
    """How a non-empty cell of the column is validated, in words."""
    if column.kind is Kind.CHOICE:
        return "one of " + ", ".join(f"`{choice}`" for choice in column.choices)
    return {
        Kind.TEXT: "text",
        Kind.COUNT: "integer ≥ 1",
        Kind.POSITIVE: "number > 0",
        Kind.NON_NEGATIVE: "number ≥ 0",
        Kind.FINITE: "finite number",
        Kind.NON_NEGATIVE_INT: "integer ≥ 0",
    }[column.kind]


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def result_rows() -> list[tuple[str, str]]:
    rows = [(f"`{name}`", RESULT_MEANINGS[name]) for name in RESULT_COLUMNS]
    rows.insert(2, ("*case parameters*", "see below; they identify a case (with `api`)"))
    return rows


def case_rows(specs: Sequence) -> list[tuple[str, str, str]]:
    return [
        (f"`{spec.script}`", f"`{spec.api}`", ", ".join(f"`{f}`" for f in spec.case_fields))
        for spec in specs
    ]


def optional_sections(columns: Sequence[Column]) -> list[str]:
    lines = []
    for role in Role:
        members = [column for column in columns if column.role is role]
        if not members:
            continue
        lines += ["", f"### {ROLE_TITLES[role]}", ""]
        rows = [(f"`{c.name}`", kind_text(c), c.description) for c in members]
        lines += table(("column", "valid values", "meaning"), rows)
    return lines


def render(specs: Sequence | None = None, columns: Sequence[Column] = OPTIONAL_COLUMNS) -> str:
    """The whole page; ``specs``: the bench scripts' BenchmarkSpec (default: import them)."""
    if specs is None:
        specs = [importlib.import_module(name).SPEC for name in BENCH_SCRIPTS]
    defaults = ", ".join(
        f"`{name}` (missing: {f'`{value}`' if value else 'empty'})"
        for name, value in IDENTITY_DEFAULTS.items()
    )
    lines = [
        f"<!-- Generated by `{COMMAND}` from the registry in",
        "fi_attn_bench/results/schema.py. Do not edit: change the registry and rerun the command. -->",
        "",
        f"# CSV schema (v{SCHEMA_VERSION})",
        "",
        INTRO,
        "",
        "## Result columns",
        "",
        "Always present, in this order around the case parameters.",
        "",
        *table(("column", "meaning"), result_rows()),
        "",
        "## Case parameters per script",
        "",
        *table(("script", "wrapper (`api`)", "case parameters"), case_rows(specs)),
        "",
        CASE_NOTES,
        "",
        f"Identity columns added after v1 first shipped: {defaults}. A CSV without one reads it "
        "as that value, so old baselines still match new runs.",
        "",
        "## Optional columns",
        "",
        "Metadata, never case parameters; empty means unknown. The summarizer checks every "
        "non-empty cell against its valid values.",
        *optional_sections(columns),
        "",
        "## Derived quantities and old CSVs",
        "",
        DERIVED,
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
