"""FIB definitions mapped to the scripts, and FIB workloads to cases with their real inputs.

A definition maps when its ``op_type`` and stage name one of the kinds below and it declares the
inputs that kind reads; anything else is listed with the reason, never guessed.  A workload's
page tables and index tensors come from its safetensors file and are checked here, at plan time
(exit 2 on the first bad one); its q/K/V come from the file or, for ``random`` inputs, from the
case's seed; a ``scalar`` ``sm_scale`` is the softmax scale of the FlashInfer call and the
reference alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged
from fi_attn_bench.cases import inputs as bi
from fi_attn_bench.cases.spec import Settings
from fi_attn_bench.cases.workloads import Batch, Workload, WorkloadError, check_batch
from fi_attn_bench.fib import tensors as ft
from fi_attn_bench.fib.dataset import Dataset, Definition, FibError, InputSource
from fi_attn_bench.fib.dataset import Workload as FibWorkload

FLOAT_DTYPES = ("float16", "bfloat16")
KNOWN_OPTIONAL = ("sm_scale", "return_lse", "kv_last_page_len")


@dataclass(frozen=True)
class Kind:
    """One kind of FIB definition a script measures: the inputs it reads and its case heads."""

    label: str
    script: str
    float_inputs: tuple[str, ...]  # q/K/V: from the file or random
    index_inputs: tuple[str, ...]  # indptrs and page ids: from the file only
    heads: Mapping[str, tuple[str, ...]]  # case field -> the definition axes that may give it
    paged: bool
    decode: bool


GQA_HEADS = {"num_qo_heads": ("num_qo_heads",), "num_kv_heads": ("num_kv_heads",)}
KINDS = {
    "gqa_paged decode": Kind(
        "gqa_paged decode",
        decode.SPEC.script,
        ("q", "k_cache", "v_cache"),
        ("kv_indptr", "kv_indices"),
        {**GQA_HEADS, "head_dim": ("head_dim",)},
        paged=True,
        decode=True,
    ),
    "gqa_paged prefill": Kind(
        "gqa_paged prefill",
        prefill_paged.SPEC.script,
        ("q", "k_cache", "v_cache"),
        ("qo_indptr", "kv_indptr", "kv_indices"),
        {**GQA_HEADS, "head_dim": ("head_dim",)},
        paged=True,
        decode=False,
    ),
    "gqa_ragged": Kind(
        "gqa_ragged",
        prefill_ragged.SPEC.script,
        ("q", "k", "v"),
        ("qo_indptr", "kv_indptr"),
        {
            **GQA_HEADS,
            "head_dim_qk": ("head_dim_qk", "head_dim"),
            "head_dim_vo": ("head_dim_vo", "head_dim"),
        },
        paged=False,
        decode=False,
    ),
    "mla_paged decode": Kind(
        "mla_paged decode",
        mla.SPEC.script,
        ("q_nope", "q_pe", "ckv_cache", "kpe_cache"),
        ("kv_indptr", "kv_indices"),
        {
            "num_heads": ("num_qo_heads", "num_heads"),
            "head_dim_ckv": ("head_dim_ckv",),
            "head_dim_kpe": ("head_dim_kpe",),
        },
        paged=True,
        decode=True,
    ),
}
MLA_OPTIONAL = ("ckv_scale", "ckv_scale_arr", "kpe_scale")


@dataclass(frozen=True)
class Mapped:
    """A definition one script measures, with its case heads, dtype and page size."""

    definition: Definition
    kind: Kind
    heads: Mapping[str, int]
    dtype: str
    page_size: int | None  # None: not paged (gqa_ragged)


@dataclass(frozen=True)
class Unmapped:
    definition: Definition
    reason: str


def _stage(definition: Definition) -> str | None:
    """decode or prefill, from the name FlashInfer and FIB give, the tags, or the inputs."""
    name, tags = definition.name, definition.tags
    if "_decode" in name or "stage:decode" in tags:
        return "decode"
    if "_prefill" in name or "stage:prefill" in tags:
        return "prefill"
    if definition.op_type == "gqa_paged":
        return "prefill" if "qo_indptr" in definition.inputs else "decode"
    return None


def _kind_of(definition: Definition) -> Kind | str:
    op = definition.op_type
    if op == "gqa_ragged":
        return KINDS["gqa_ragged"]
    if op in ("gqa_paged", "mla_paged"):
        stage = _stage(definition)
        kind = KINDS.get(f"{op} {stage}")
        if kind is None:
            return f"{op} {stage or 'of unknown stage'}: no script measures it (MLA: decode only)"
        return kind
    return f"op_type {op!r}: no script measures it (gqa_paged, gqa_ragged, mla_paged decode)"


def _head_value(definition: Definition, axes: Sequence[str]) -> int | None:
    return next((definition.const(a) for a in axes if definition.const(a) is not None), None)


def _rank(kind: Kind, name: str) -> int:
    """Axes the script's tensor has: a paged cache [pages, page_size, (heads,) dim]."""
    if kind.paged and name.endswith("_cache"):
        return 3 if kind.label.startswith("mla") else 4
    return 3


def classify(definition: Definition) -> Mapped | Unmapped:
    """Which script measures ``definition``, or why none does."""
    kind = _kind_of(definition)
    if isinstance(kind, str):
        return Unmapped(definition, kind)
    inputs = definition.inputs
    missing = [n for n in (*kind.float_inputs, *kind.index_inputs) if n not in inputs]
    if missing:
        return Unmapped(definition, f"{kind.label} without input {missing[0]!r}")
    allowed = {*kind.float_inputs, *kind.index_inputs, *KNOWN_OPTIONAL, *MLA_OPTIONAL}
    extra = [n for n, s in inputs.items() if n not in allowed and not s.optional]
    if extra:
        return Unmapped(definition, f"input {extra[0]!r} has no counterpart in {kind.script}")
    heads = {field: _head_value(definition, axes) for field, axes in kind.heads.items()}
    absent = [field for field, value in heads.items() if not value]
    if absent:
        return Unmapped(definition, f"no constant value for {absent[0]}")
    if "num_kv_heads" in heads and heads["num_qo_heads"] % heads["num_kv_heads"]:
        return Unmapped(definition, "num_qo_heads is not a multiple of num_kv_heads")
    flat = [n for n in kind.float_inputs if len(inputs[n].shape or ()) != _rank(kind, n)]
    if flat:
        shape = list(inputs[flat[0]].shape or ())
        return Unmapped(
            definition, f"input {flat[0]!r} has axes {shape}; {kind.script} takes "
            f"{_rank(kind, flat[0])} (pages, page_size, ...)"
        )  # fmt: skip
    dtypes = {inputs[n].dtype for n in kind.float_inputs}
    if len(dtypes) > 1 or not dtypes <= set(FLOAT_DTYPES):
        return Unmapped(
            definition, f"q/K/V dtype {'/'.join(sorted(dtypes))}: the scripts measure "
            f"{' or '.join(FLOAT_DTYPES)} (one dtype for q, K and V)"
        )  # fmt: skip
    page_size = definition.const("page_size") if kind.paged else None
    if kind.paged and not page_size:
        return Unmapped(definition, "no constant value for page_size")
    return Mapped(definition, kind, heads, dtypes.pop(), page_size)


# ---------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------


def _shape(definition: Definition, name: str, workload: FibWorkload) -> list[int]:
    shape = []
    for axis in definition.inputs[name].shape or ():
        value = definition.const(axis)
        value = workload.axes.get(axis) if value is None else value
        if value is None:
            raise FibError(f"{workload.where}: axis {axis!r} of input {name!r} has no value")
        shape.append(value)
    return shape


def _index_tensor(
    mapped: Mapped, workload: FibWorkload, name: str, length: int | None
) -> torch.Tensor:
    """An index input, read from its file and checked to be a 1-D integer tensor."""
    source = workload.inputs[name]
    if source.kind != "safetensors":
        raise FibError(
            f"{workload.where}: input {name!r} is {source.kind}: page tables and indptrs "
            "must come from the workload's safetensors file"
        )
    spec = mapped.definition.inputs.get(name)
    shape = _shape(mapped.definition, name, workload) if spec and spec.shape else [length]
    if None in shape:
        raise FibError(f"{workload.where}: input {name!r} has no known length")
    ft.check_size(name, shape, "int64", workload.where)
    ft.check_file_tensor(source, name, shape, None)
    return ft.load_file_tensor(source).to(torch.int64).reshape(-1)


def _indptr(values: torch.Tensor, name: str, where: str, end: int | None) -> list[int]:
    out = values.tolist()
    if not out or out[0] != 0 or any(b < a for a, b in zip(out, out[1:], strict=False)):
        raise FibError(f"{where}: {name} must start at 0 and never decrease")
    if end is not None and out[-1] != end:
        raise FibError(f"{where}: {name} ends at {out[-1]}, the tensor it indexes has {end}")
    return out


def _diffs(indptr: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(indptr, indptr[1:], strict=False)]


@dataclass(frozen=True)
class Tables:
    """A workload's checked index tensors (CPU, int32) and its requests."""

    batch: Batch
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor | None
    kv_last_page_len: torch.Tensor | None
    num_pages: int


def _page_lengths(
    mapped: Mapped, workload: FibWorkload, kv_indptr: list[int], num_pages: int
) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """(kv_len per request, page ids, last page lengths): FIB's full pages unless the
    workload gives kv_last_page_len."""
    where, size = workload.where, mapped.page_size
    indices = _index_tensor(mapped, workload, "kv_indices", None)
    if len(indices) < kv_indptr[-1]:
        raise FibError(
            f"{where}: kv_indices has {len(indices)} ids, kv_indptr needs {kv_indptr[-1]}"
        )
    used = indices[: kv_indptr[-1]]
    if len(used) and (int(used.min()) < 0 or int(used.max()) >= num_pages):
        raise FibError(f"{where}: kv_indices holds a page id outside 0..{num_pages - 1}")
    pages = _diffs(kv_indptr)
    if any(p == 0 for p in pages):
        raise FibError(f"{where}: request {pages.index(0)} has no KV page")
    if "kv_last_page_len" in workload.inputs:
        last = _index_tensor(mapped, workload, "kv_last_page_len", len(pages)).tolist()
        if len(last) != len(pages) or not all(1 <= x <= size for x in last):
            raise FibError(f"{where}: kv_last_page_len must hold {len(pages)} values in 1..{size}")
    else:
        last = [size] * len(pages)
    lengths = [(p - 1) * size + tail for p, tail in zip(pages, last, strict=True)]
    return lengths, used, torch.tensor(last, dtype=torch.int32)


def _first_dim(mapped: Mapped, workload: FibWorkload, name: str) -> int:
    return _shape(mapped.definition, name, workload)[0]


def workload_tables(mapped: Mapped, workload: FibWorkload) -> Tables:
    """The requests and index tensors of ``workload``, every bound checked."""
    kind, where = mapped.kind, workload.where
    q_name, k_name = kind.float_inputs[0], kind.float_inputs[2]
    q_rows, kv_rows = _first_dim(mapped, workload, q_name), _first_dim(mapped, workload, k_name)
    kv_end = None if kind.paged else kv_rows
    kv_indptr = _indptr(
        _index_tensor(mapped, workload, "kv_indptr", None), "kv_indptr", where, kv_end
    )
    count = len(kv_indptr) - 1
    if kind.decode:
        qo_indptr = list(range(count + 1))
        if q_rows != count:
            raise FibError(f"{where}: {q_name} has {q_rows} rows for {count} requests")
    else:
        qo_values = _index_tensor(mapped, workload, "qo_indptr", None)
        qo_indptr = _indptr(qo_values, "qo_indptr", where, q_rows)
        if len(qo_indptr) != len(kv_indptr):
            raise FibError(f"{where}: qo_indptr and kv_indptr differ in length")
    indices = last = None
    if kind.paged:
        kv_lens, indices, last = _page_lengths(mapped, workload, kv_indptr, kv_rows)
    else:
        kv_lens = _diffs(kv_indptr)
    try:
        batch = check_batch(Batch.of(_diffs(qo_indptr), kv_lens), "workload")
    except WorkloadError as exc:
        raise FibError(f"{where}: {exc}") from None
    as_int32 = partial(torch.tensor, dtype=torch.int32)
    return Tables(
        batch=batch,
        qo_indptr=as_int32(qo_indptr),
        kv_indptr=as_int32(kv_indptr),
        kv_indices=None if indices is None else indices.to(torch.int32),
        kv_last_page_len=last,
        num_pages=kv_rows,
    )


def _float_sources(mapped: Mapped, workload: FibWorkload) -> dict[str, tuple[InputSource, list]]:
    """Each q/K/V input's source and shape, files checked against the definition."""
    out = {}
    for name in mapped.kind.float_inputs:
        source = workload.inputs[name]
        shape = _shape(mapped.definition, name, workload)
        ft.check_size(name, shape, mapped.dtype, workload.where)
        if source.kind == "scalar":
            raise FibError(f"{workload.where}: input {name!r} is a scalar, not a tensor")
        if source.kind == "safetensors":
            ft.check_file_tensor(source, name, shape, mapped.dtype)
        out[name] = (source, shape)
    return out


def _sm_scale(workload: FibWorkload) -> float | None:
    source = workload.inputs.get("sm_scale")
    if source is None:
        return None
    if source.kind != "scalar" or isinstance(source.value, bool) or source.value <= 0:
        raise FibError(f"{workload.where}: sm_scale must be a positive scalar input")
    return float(source.value)


def _unsupported_inputs(mapped: Mapped, workload: FibWorkload) -> None:
    needed = (*mapped.kind.float_inputs, *mapped.kind.index_inputs)
    missing = [n for n in needed if n not in workload.inputs]
    if missing:
        raise FibError(f"{workload.where}: no input {missing[0]!r}")
    scaled = [n for n in MLA_OPTIONAL if n in workload.inputs]
    if scaled:
        raise FibError(f"{workload.where}: input {scaled[0]!r} (FP8 scales) is not measured")


@dataclass(frozen=True)
class FileInputs:
    """How a case's inputs are built on its device: the workload's files and scalars."""

    mapped: Mapped
    sources: Mapping[str, tuple[InputSource, list]]
    tables: Tables
    sm_scale: float | None

    def __call__(self, settings: Settings) -> object:
        dev, dt = settings.device, settings.dtype
        gen = bi.generator(settings.seed, dev)
        values = {
            name: ft.materialize(source, shape, dt, dev, gen)
            for name, (source, shape) in self.sources.items()
        }
        return _BUILDERS[self.mapped.kind.label](self, values, dev)


def _paged_table(inputs: FileInputs, dev: torch.device) -> bi.PagedTable:
    t = inputs.tables
    return bi.PagedTable(
        kv_indptr=t.kv_indptr.to(dev),
        kv_indices=t.kv_indices.to(dev),
        kv_last_page_len=t.kv_last_page_len.to(dev),
        kv_lens=torch.tensor(t.batch.kv_lens, dtype=torch.int32, device=dev),
        num_pages=t.num_pages,
        page_size=inputs.mapped.page_size,
    )


def _decode(inputs: FileInputs, v: dict, dev: torch.device) -> decode.DecodeInputs:
    table = _paged_table(inputs, dev)
    return decode.DecodeInputs(v["q"], v["k_cache"], v["v_cache"], table, inputs.sm_scale)


def _prefill(inputs: FileInputs, v: dict, dev: torch.device) -> prefill_paged.PagedPrefillInputs:
    return prefill_paged.PagedPrefillInputs(
        v["q"], inputs.tables.qo_indptr.to(dev), v["k_cache"], v["v_cache"],
        _paged_table(inputs, dev), inputs.sm_scale,
    )  # fmt: skip


def _ragged(inputs: FileInputs, v: dict, dev: torch.device) -> prefill_ragged.RaggedInputs:
    t = inputs.tables
    return prefill_ragged.RaggedInputs(
        v["q"], v["k"], v["v"], t.qo_indptr.to(dev), t.kv_indptr.to(dev), inputs.sm_scale
    )


def _mla(inputs: FileInputs, v: dict, dev: torch.device) -> mla.MlaInputs:
    return mla.MlaInputs(
        v["q_nope"], v["q_pe"], v["ckv_cache"], v["kpe_cache"],
        inputs.tables.qo_indptr.to(dev), _paged_table(inputs, dev), inputs.sm_scale,
    )  # fmt: skip


_BUILDERS: Mapping[str, Callable[[FileInputs, dict, torch.device], object]] = {
    "gqa_paged decode": _decode,
    "gqa_paged prefill": _prefill,
    "gqa_ragged": _ragged,
    "mla_paged decode": _mla,
}


def workload_label(definition: str, uuid: str) -> str:
    """The case's ``workload`` cell: the definition and the workload's uuid."""
    return f"{definition}:{uuid}"


def fib_case(mapped: Mapped, workload: FibWorkload, directory: str) -> dict[str, object]:
    """The unresolved case of one workload (``serving.resolve`` fills its length fields)."""
    _unsupported_inputs(mapped, workload)
    inputs = FileInputs(
        mapped, _float_sources(mapped, workload), workload_tables(mapped, workload),
        _sm_scale(workload),
    )  # fmt: skip
    label = workload_label(workload.definition, workload.uuid)
    batch = inputs.tables.batch
    return {
        **mapped.heads,
        "workload": Workload(label, batch, ("--fib", directory), inputs=inputs),
    }


def mapped_definitions(dataset: Dataset) -> list[Mapped | Unmapped]:
    return [classify(d) for d in dataset.definitions.values()]
