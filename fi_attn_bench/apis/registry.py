"""The one list of APIs: bench_all's scripts, the doctor's wrappers, the head-to-head plugins'
scripts and the summarizer's known layouts all read it.  A new API is one module beside these
and one line here.  Reading the list imports no API module (the summarizer stays without torch)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fi_attn_bench.errors import UsageError

if TYPE_CHECKING:
    from fi_attn_bench.cases.spec import BenchmarkSpec


@dataclass(frozen=True)
class Api:
    """One registered API: its script name, the module whose ``SPEC`` declares it, and its case
    columns (the CSV layout the summarizer accepts; a test holds them equal to the SPEC's)."""

    script: str  # bench_all --scripts NAME; the face file is NAME.py
    module: str
    case_fields: tuple[str, ...]


HEADS = ("num_qo_heads", "num_kv_heads")
APIS: tuple[Api, ...] = (
    Api("bench_batch_decode", "fi_attn_bench.apis.decode",
        ("batch_size", "seq_len_q", "seq_len_kv", *HEADS, "head_dim")),
    Api("bench_batch_prefill_paged", "fi_attn_bench.apis.prefill_paged",
        ("batch_size", "seq_len", *HEADS, "head_dim")),
    Api("bench_batch_prefill_ragged", "fi_attn_bench.apis.prefill_ragged",
        ("batch_size", "seq_len", *HEADS, "head_dim_qk", "head_dim_vo")),
    Api("bench_batch_mla", "fi_attn_bench.apis.mla",
        ("batch_size", "seq_len", "num_heads", "head_dim_ckv", "head_dim_kpe")),
)  # fmt: skip


def script_names() -> tuple[str, ...]:
    return tuple(api.script for api in APIS)


def case_field_sets() -> tuple[tuple[str, ...], ...]:
    """Every registered API's case columns, without importing any API module."""
    return tuple(api.case_fields for api in APIS)


def spec(script: str) -> BenchmarkSpec:
    """The spec of a registered script (UsageError for one the registry lacks)."""
    for api in APIS:
        if api.script == script:
            return importlib.import_module(api.module).SPEC
    raise UsageError(f"no API is registered as {script!r}; known: {', '.join(script_names())}")


def specs(scripts: Sequence[str] | None = None) -> list[BenchmarkSpec]:
    """The specs of ``scripts`` (default: every registered API), in that order."""
    return [spec(script) for script in (script_names() if scripts is None else scripts)]


def spec_of_wrapper(wrapper: str) -> BenchmarkSpec:
    """The spec whose API (FlashInfer wrapper class) is ``wrapper``."""
    for found in specs():
        if found.api == wrapper:
            return found
    raise UsageError(f"no registered API measures {wrapper}")
