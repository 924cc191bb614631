"""What a benchmark script declares: its spec, the settings it is handed, and what it prepares for one case."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from fi_attn_bench.cases.workloads import Batch

DEFAULT_DTYPE = torch.float16
DEFAULT_PAGE_SIZE = 16  # tokens per KV page
DEFAULT_WORKSPACE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """Resolved options handed to a script's prepare()."""

    device: torch.device
    dtype: torch.dtype
    page_size: int
    impl_kind: str  # "flashinfer" | "torch": what prepare() builds (the --backend option)
    seed: int  # RNG seed for this case's inputs (derived from --seed and the case)
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES
    wrapper_backend: str = "auto"  # FlashInfer's backend= for the wrapper (--impl flashinfer:X)

    @property
    def backend(self) -> str:
        """The old name of ``impl_kind``, kept so users' own prepare() functions still run."""
        return self.impl_kind


@dataclass
class Prepared:
    """What a script builds for one case."""

    run: Callable[[], object]
    output: torch.Tensor | None
    reference: Callable[[], torch.Tensor] | None
    plan_ms: float
    kernel_pattern: str | None = None
    inputs: object | None = None  # the case's inputs (BenchmarkSpec.make_inputs), for plugins
    resolved_backend: str = ""  # the backend FlashInfer's wrapper resolved "auto" to, when it tells


@dataclass(frozen=True)
class VariedBatches:
    """How a script takes varied-length batches (``--batch``, ``--workload``, ``--preset serving``)."""

    heads: Mapping[str, int]  # the non-length case fields of a --batch / --workload case
    shape_fields: Callable[[Batch], Mapping[str, int]]  # batch_size and rounded mean lengths
    decode_only: bool  # every request must have q_len 1
    presets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> batch specs


def no_inputs(case: Mapping[str, int], settings: Settings) -> None:
    """For a spec whose prepare() builds what it runs on by itself."""
    return None


@dataclass(frozen=True)
class BenchmarkSpec:
    """One script = one spec: its API, case fields, presets and named functions.

    The harness builds a case's inputs once (``make_inputs``) and hands them to every
    implementation: ``prepare(case, settings, inputs)`` builds the FlashInfer call, and
    ``reference(case, inputs)``, where declared, is what ``--backend torch`` measures."""

    api: str
    script: str
    case_fields: tuple[str, ...]
    presets: Mapping[str, tuple[Mapping[str, int], ...]]
    prepare: Callable[[Mapping[str, int], Settings, object], Prepared]
    io_bytes: Callable[[Mapping[str, int], int], float]
    flops: Callable[[Mapping[str, int]], float]
    varied: VariedBatches | None = None  # None: uniform batches only
    make_inputs: Callable[[Mapping[str, int], Settings], object] = no_inputs
    reference: Callable[[Mapping[str, int], object], Callable[[], torch.Tensor]] | None = None


DTYPES: Mapping[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16}


DTYPE_ALIASES: Mapping[str, str] = {"fp16": "float16", "half": "float16", "bf16": "bfloat16"}
