"""Inputs, case grids and small helpers shared by the four ``bench_batch_*.py`` scripts.

Everything here is about *what* a case computes on: deterministic random tensors, paged-KV
tables whose page ids are a random permutation (a real allocator never hands out 0..n-1),
case grids as data, the causal pair count behind the FLOP formulas, and the host-timed
``plan()``.  Timing ``run()`` is the harness's job (``bench_common``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared, Settings
from fi_attn_bench.device.sync import default_device, synchronize

NUM_QO_HEADS = 32
"""The seed's query head count (Llama-style GQA)."""

SPARE_PAGE_FRACTION = 8
"""One unused page per this many used ones: page ids then do not cover 0..n-1 exactly."""

Case = Mapping[str, int]


def gqa_kv_heads(head_dim: int) -> int:
    """The seed's rule for decode and paged prefill: 8 KV heads at head_dim 64, else 4."""
    return 8 if head_dim == 64 else 4


# ---------------------------------------------------------------------------------------
# Case grids
# ---------------------------------------------------------------------------------------


def grid(
    make: Callable[..., dict[str, int]],
    where: Callable[[Case], bool] = lambda case: True,
    **axes: Iterable[object],
) -> tuple[dict[str, int], ...]:
    """Cases ``make(**point)`` for every point of the product of ``axes`` that passes ``where``.

    Axis order is the keyword order, so a grid reads like the table it produces.
    """
    names = list(axes)
    points = itertools.product(*(tuple(values) for values in axes.values()))
    cases = (make(**dict(zip(names, point, strict=True))) for point in points)
    return tuple(case for case in cases if where(case))


def within(
    length: str, max_tokens: int, max_quadratic: int | None = None
) -> Callable[[Case], bool]:
    """Grid filter bounding one run()'s size, so a preset's slowest case stays predictable.

    ``batch_size * case[length]`` tokens at most ``max_tokens``; for causal prefill also
    ``batch_size * case[length]**2`` (the attention work) at most ``max_quadratic``.
    """

    def keep(case: Case) -> bool:
        tokens = case["batch_size"] * case[length]
        quadratic = tokens * case[length]
        return tokens <= max_tokens and (max_quadratic is None or quadratic <= max_quadratic)

    return keep


def unique_cases(*groups: Iterable[Case]) -> tuple[dict[str, int], ...]:
    """Concatenate case groups, keeping the first occurrence of a case listed twice."""
    seen: set[tuple[tuple[str, int], ...]] = set()
    out = []
    for case in itertools.chain.from_iterable(groups):
        key = tuple(case.items())
        if key not in seen:
            seen.add(key)
            out.append(dict(case))
    return tuple(out)


def causal_pairs(q_len: int, kv_len: int) -> int:
    """Unmasked (query, key) pairs of one request under FlashInfer's bottom-right causal mask.

    Query ``j`` sees keys ``0 .. kv_len - q_len + j``: with ``q_len == kv_len`` that is
    ``q_len (q_len + 1) / 2``; queries that would see no key (``q_len > kv_len``) count 0.
    """
    offset = kv_len - q_len
    if offset >= 0:
        return q_len * offset + q_len * (q_len + 1) // 2
    return kv_len * (kv_len + 1) // 2


# ---------------------------------------------------------------------------------------
# Deterministic random inputs
# ---------------------------------------------------------------------------------------


def generator(seed: int, device: torch.device) -> torch.Generator:
    """A generator on ``device``; ``Settings.seed`` is already per case (the harness
    derives it from ``--seed`` and the case), so it is used as it is."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def randn(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> torch.Tensor:
    """Standard-normal data (never zeros, so an unread input cannot look right)."""
    return torch.randn(tuple(shape), dtype=dtype, device=device, generator=gen)


def indptr(lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """int32 prefix sums ``[0, l0, l0 + l1, ...]`` of per-request lengths."""
    starts = [0, *itertools.accumulate(lengths)]
    return torch.tensor(starts, dtype=torch.int32, device=device)


def pages_for(kv_len: int, page_size: int) -> int:
    """Pages one request of ``kv_len`` tokens occupies (at least one)."""
    return max(1, -(-kv_len // page_size))


def last_page_len(kv_len: int, page_size: int) -> int:
    """Tokens in the request's last page, in 1..page_size (FlashInfer's convention)."""
    return kv_len - (pages_for(kv_len, page_size) - 1) * page_size


@dataclass(frozen=True)
class KvRows:
    """Where each request's K/V lives along dim 0 of ``tensors``: request ``r`` reads rows
    ``rows[indptr[r]:indptr[r + 1]]`` (pages of a paged cache, tokens of a ragged one).
    The integrity checks rewrite a window of every request's rows before each timed call."""

    tensors: tuple[torch.Tensor, ...]
    indptr: torch.Tensor  # int, [requests + 1]
    rows: torch.Tensor  # int, the row ids of every request in turn


@dataclass(frozen=True)
class PagedTable:
    """A paged KV layout as FlashInfer's plan() takes it (int32 tensors on the device)."""

    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor
    kv_lens: torch.Tensor
    num_pages: int
    page_size: int

    def kv_rows(self, *caches: torch.Tensor) -> KvRows:
        """The caches' pages of every request (``KvRows``)."""
        return KvRows(caches, self.kv_indptr, self.kv_indices)


def paged_table(
    kv_lens: Sequence[int], page_size: int, device: torch.device, seed: int
) -> PagedTable:
    """Page tables for ``kv_lens`` whose page ids are a random permutation of a larger pool.

    A pool with spare pages and shuffled ids exercises the indirection the way a serving
    engine's allocator does; contiguous 0..n-1 would let a kernel look faster than it is.
    The permutation is drawn on the CPU (``seed``), so it is the same on every device.
    """
    per_request = [pages_for(n, page_size) for n in kv_lens]
    used = sum(per_request)
    num_pages = used + max(1, used // SPARE_PAGE_FRACTION)
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed))[:used]
    return PagedTable(
        kv_indptr=indptr(per_request, device),
        kv_indices=perm.to(device=device, dtype=torch.int32),
        kv_last_page_len=torch.tensor(
            [last_page_len(n, page_size) for n in kv_lens], dtype=torch.int32, device=device
        ),
        kv_lens=torch.tensor(list(kv_lens), dtype=torch.int32, device=device),
        num_pages=num_pages,
        page_size=page_size,
    )


# ---------------------------------------------------------------------------------------
# Host timing of plan()
# ---------------------------------------------------------------------------------------


def timed_ms(fn: Callable[[], object], device: torch.device, *, warm_first: bool = False) -> float:
    """Host wall time of ``fn()`` in ms, with the device idle before and after.

    ``warm_first`` calls ``fn`` once untimed: a wrapper's first plan() JIT-compiles or
    loads its kernel module (seconds), which is not the plan cost a server pays per step.
    """
    if warm_first:
        fn()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def reference_as_run(reference: Callable[[], torch.Tensor], inputs: object = None) -> Prepared:
    """``--backend torch``: the float32 reference is what is measured (the harness does not
    check it against itself; ``reference`` stays for the plugins measured next to it)."""
    return Prepared(run=reference, output=None, reference=reference, plan_ms=0.0, inputs=inputs)


def case_inputs(spec: BenchmarkSpec, case: Mapping[str, int], settings: Settings) -> object:
    """The inputs of ``case``: its workload's own (read from a file) where it carries them,
    else the script's ``make_inputs``."""
    workload = case.get("workload")
    from_file = getattr(workload, "inputs", None)
    return from_file(settings) if from_file is not None else spec.make_inputs(case, settings)


def prepare_case(
    spec: BenchmarkSpec, case: Mapping[str, int], settings: Settings, inputs: object = None
) -> Prepared:
    """One implementation's Prepared for ``case`` on ``inputs`` (built here when none are
    handed over): the reference as the run for ``--backend torch`` when the spec declares one,
    else the spec's prepare()."""
    if inputs is None:
        inputs = case_inputs(spec, case, settings)
    if settings.impl_kind == "torch" and spec.reference is not None:
        return reference_as_run(spec.reference(case, inputs), inputs)
    return spec.prepare(case, settings, inputs)


def setup_paged_kv_indptr(
    batch_size: int, seq_len: int, page_size: int, device=None, *, seed: int = 0
):
    """Page table of ``batch_size`` sequences of ``seq_len`` tokens: (indptr, indices, last_page_len).

    Pages are a seeded permutation of 0..n-1, not the identity, as in a real serving cache.
    """
    pages_per_seq = max(1, math.ceil(seq_len / page_size))
    device = default_device(device)
    generator = torch.Generator().manual_seed(seed)
    indptr = torch.arange(batch_size + 1, dtype=torch.int32) * pages_per_seq
    indices = torch.randperm(batch_size * pages_per_seq, generator=generator).to(torch.int32)
    last = torch.full((batch_size,), (seq_len - 1) % page_size + 1, dtype=torch.int32)
    return indptr.to(device), indices.to(device), last.to(device)
