"""Varied-length cases: a case whose ``workload`` field holds a ``Workload``.

A preset lists such a case with its batch spec as text; ``resolve`` draws its batch under the
run's ``--seed`` and fills the script's length fields (``batch_size`` and rounded mean
lengths, for plots and filters) from it.  Uniform cases pass through untouched, so their
fields, values, seeds and identity stay what they were.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.cases.workload_files import read_workload_file
from fi_attn_bench.cases.workloads import (
    Batch,
    Workload,
    WorkloadError,
    uniform_twin,
    workload_from_spec,
)

WORKLOAD_FIELD = "workload"
# The ``preset`` a sweep of --batch/--workload cases records (they come from no preset).
COMMAND_LINE_CASES = "--batch/--workload"

DECODE_SERVING = (
    "4d@uniform:lo=512,hi=8k",
    "16d@lognormal:median=1k,sigma=1.0,min=16,max=32k",
    "64d@lognormal:median=1k,sigma=1.0,min=16,max=32k",
    "256d@lognormal:median=1k,sigma=1.0,min=16,max=32k",
    "64d@lognormal:median=4k,sigma=0.8,min=128,max=128k",
    "16d@bimodal:short=256,long=64k,p_long=0.25",
    "128d@bimodal:short=512,long=32k,p_long=0.05",
    "32d@pareto:min=256,alpha=1.1,max=128k",
    "512d@uniform:lo=64,hi=4k",
    "1d@128k+63d@1k",
)
"""The synthetic ``serving`` preset of the decode-shaped wrappers (decode, MLA) (README, "Serving-shaped batches"): chat-like log-normal
contexts (median 1k), long-context, bimodal, long-tail and one-straggler batches of 4..512
requests, at most ~1.1M cached tokens (~1.3 ms at 1.8 TB/s)."""


def workload_of(case: Mapping[str, object]) -> Workload | None:
    value = case.get(WORKLOAD_FIELD)
    return value if isinstance(value, Workload) else None


def mean_length(total: int, count: int) -> int:
    """``total / count`` rounded half up: the length field of a varied case."""
    return (2 * total + count) // (2 * count)


def mean_kv_length(batch: Batch) -> int:
    """A varied batch's mean KV length, rounded half up."""
    return mean_length(sum(batch.kv_lens), len(batch.requests))


def batch_size_and_seq_len(batch: Batch) -> dict[str, int]:
    """The shape fields of a varied case whose length field is ``seq_len`` (the KV length)."""
    return {"batch_size": len(batch.requests), "seq_len": mean_kv_length(batch)}


def resolve(spec: BenchmarkSpec, case: Mapping[str, object], seed: int) -> dict[str, object]:
    """A case with its workload drawn and checked against the script, or the case itself."""
    raw = case.get(WORKLOAD_FIELD)
    if not raw:
        return dict(case)
    workload = raw if isinstance(raw, Workload) else workload_from_spec(str(raw), seed)
    varied = spec.varied
    if varied is None:
        raise WorkloadError(f"{spec.script} takes uniform batches only")
    if varied.decode_only and any(q != 1 for q in workload.batch.q_lens):
        raise WorkloadError(
            f"{workload.label}: {spec.script} measures decode (q_len 1 per request); "
            "prefill chunks belong to bench_batch_prefill_paged.py"
        )
    merged = {**varied.heads, **case, **varied.shape_fields(workload.batch)}
    return {**{name: merged[name] for name in spec.case_fields}, WORKLOAD_FIELD: workload}


def preset_cases(spec: BenchmarkSpec, preset: str) -> tuple[Mapping[str, object], ...]:
    """A preset's cases: a uniform grid, or a varied preset's specs as unresolved cases."""
    if preset in spec.presets:
        return tuple(spec.presets[preset])
    return tuple({WORKLOAD_FIELD: text} for text in spec.varied.presets[preset])


def preset_names(spec: BenchmarkSpec) -> list[str]:
    varied = spec.varied.presets if spec.varied else {}
    return sorted({*spec.presets, *varied})


def resolve_all(
    spec: BenchmarkSpec, cases: Iterable[Mapping[str, object]], seed: int
) -> tuple[dict[str, object], ...]:
    return tuple(resolve(spec, case, seed) for case in cases)


def command_line_cases(
    spec: BenchmarkSpec, batches: Sequence[str], files: Sequence[str], seed: int
) -> tuple[dict[str, object], ...]:
    """The cases of ``--batch SPEC`` and ``--workload FILE[:LINE]``, in command-line order."""
    workloads = [workload_from_spec(text, seed) for text in batches]
    workloads += [w for path in files for w in read_workload_file(path)]
    unique = {w.label: w for w in reversed(workloads)}  # a batch given twice is one case
    kept = [w for w in workloads if unique.get(w.label) is w]
    return resolve_all(spec, ({WORKLOAD_FIELD: w} for w in kept), seed)


def twin_case(spec: BenchmarkSpec, case: Mapping[str, object]) -> dict[str, object]:
    """The uniform batch with as many requests and tokens as ``case``'s, on the same heads."""
    workload = workload_of(case)
    twin = Workload(f"{workload.label} (uniform twin)", uniform_twin(workload.batch))
    return resolve(spec, {**case, WORKLOAD_FIELD: twin}, 0)


def has_workloads(cases: Iterable[Mapping[str, object]]) -> bool:
    return any(workload_of(case) is not None for case in cases)


def with_workload_field(spec: BenchmarkSpec) -> BenchmarkSpec:
    """The spec of a sweep of varied cases: ``workload`` joins the identity columns."""
    if WORKLOAD_FIELD in spec.case_fields:
        return spec
    return replace(spec, case_fields=(*spec.case_fields, WORKLOAD_FIELD))


def shape_columns(case: Mapping[str, object]) -> dict[str, object]:
    """The workload registry columns of a varied case (none for a uniform one)."""
    workload = workload_of(case)
    return workload.batch.shape().columns() if workload else {}


def case_batch(case: Mapping[str, object], q_len: int, kv_len: int) -> Batch:
    """The requests of a case: its workload's, or ``batch_size`` copies of (q_len, kv_len)."""
    workload = workload_of(case)
    if workload is not None:
        return workload.batch
    return Batch.uniform(int(case["batch_size"]), q_len, kv_len)
