"""Device peaks: what the hardware can do, so a result can be read as a share of it.

Three sources, in order of precedence (``resolve_peaks``):

1. *override*: numbers the user passes on the command line;
2. *measured*: a device-to-device copy and a dense GEMM timed once on this device by
   ``measure_peaks`` and cached per device name and dtype (``save_cached``);
3. *published*: the vendor's figures from ``PUBLISHED_PEAKS``, matched on
   ``torch.cuda.get_device_name()``.

Measured peaks are what a kernel can actually reach (a copy falls short of the published
bandwidth), so they make the better 100%. ``roofline_columns`` turns
a row's bandwidth and TFLOPS into the registered ``pct_peak_bw`` / ``pct_peak_tflops``
columns. A percentage above ``PLAUSIBLE_PCT_LIMIT`` is a measurement artefact (for
example L2 cache hits), never a speed.

This module imports torch only inside the functions that measure.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fi_attn_bench.device.peaks_command_line import (
    CACHE_ENV,
    DTYPE_ALIASES,
    PeaksRequest,
    parse_peaks_command_line,
    prog,
)

CACHE_FILE_NAME = "peaks.json"
CACHE_FORMAT_VERSION = 1
PLAUSIBLE_PCT_LIMIT = 100.0

SOURCE_PUBLISHED = "published"
SOURCE_OVERRIDE = "override"
SOURCE_MEASURED_PREFIX = "measured"


def normalize_dtype(dtype: str) -> str:
    """Canonical dtype name ('bfloat16' or 'float16'); ValueError for anything else."""
    try:
        return DTYPE_ALIASES[str(dtype).strip().lower()]
    except KeyError:
        choices = ", ".join(sorted(DTYPE_ALIASES))
        raise ValueError(f"unsupported dtype {dtype!r}; one of {choices}") from None


@dataclass(frozen=True)
class Peaks:
    """Peak copy bandwidth and dense GEMM rate of one device for one dtype.

    ``bandwidth_GB_s`` counts bytes read + written (1 GB = 1e9 bytes); ``tflops`` is
    dense (no structured sparsity). NaN means unknown (a partial override).
    ``source`` is ``"measured <YYYY-MM-DD>"``, ``"published"`` or starts with
    ``"override"``.
    """

    device: str
    bandwidth_GB_s: float
    tflops: float
    dtype: str
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        for name in ("bandwidth_GB_s", "tflops"):
            value = float(getattr(self, name))
            if not (math.isnan(value) or (math.isfinite(value) and value > 0)):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
            object.__setattr__(self, name, value)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Peaks:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


# --------------------------------------------------------------------------- published


@dataclass(frozen=True)
class PublishedPeak:
    """One row of the published-peaks table and how a device name is matched to it.

    A device name matches when its lower-case alphanumeric tokens contain every token
    of ``require``, at least one of ``any_of`` (when given) and none of ``exclude``.
    """

    name: str
    require: tuple[str, ...]
    bandwidth_GB_s: float
    tflops_fp16: float
    tflops_bf16: float
    confirmed: bool
    note: str
    any_of: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def matches(self, tokens: frozenset[str]) -> bool:
        return (
            all(token in tokens for token in self.require)
            and (not self.any_of or any(token in tokens for token in self.any_of))
            and not any(token in tokens for token in self.exclude)
        )

    def tflops(self, dtype: str) -> float:
        return self.tflops_bf16 if normalize_dtype(dtype) == "bfloat16" else self.tflops_fp16


_NVIDIA_DENSE = "dense tensor-core figure (the datasheet's 'with sparsity' number halved)"

PUBLISHED_PEAKS: tuple[PublishedPeak, ...] = (
    PublishedPeak(
        "NVIDIA H200 SXM",
        require=("h200",),
        exclude=("nvl",),
        bandwidth_GB_s=4800.0,
        tflops_fp16=989.0,
        tflops_bf16=989.0,
        confirmed=True,
        note=f"141 GB HBM3e, 4.8 TB/s; {_NVIDIA_DENSE}. Measured here: copy ~4.3 TB/s, "
        "bf16 GEMM ~790 TFLOP/s. 'NVIDIA GH200 ...' does not match.",
    ),
    PublishedPeak(
        "NVIDIA H100 SXM",
        require=("h100",),
        exclude=("pcie", "nvl"),
        bandwidth_GB_s=3350.0,
        tflops_fp16=989.0,
        tflops_bf16=989.0,
        confirmed=True,
        note=f"80 GB HBM3, 3.35 TB/s; {_NVIDIA_DENSE}. torch reports 'NVIDIA H100 80GB "
        "HBM3'; PCIe and NVL boards are not in the table.",
    ),
    PublishedPeak(
        "NVIDIA A100 SXM4 80GB",
        require=("a100", "80gb"),
        exclude=("pcie",),
        bandwidth_GB_s=2039.0,
        tflops_fp16=312.0,
        tflops_bf16=312.0,
        confirmed=True,
        note="80 GB HBM2e, 2,039 GB/s; 312 TFLOPS fp16/bf16 dense (624 with sparsity).",
    ),
    PublishedPeak(
        "NVIDIA A100 SXM4 40GB",
        require=("a100", "40gb"),
        exclude=("pcie",),
        bandwidth_GB_s=1555.0,
        tflops_fp16=312.0,
        tflops_bf16=312.0,
        confirmed=True,
        note="40 GB HBM2, 1,555 GB/s; 312 TFLOPS fp16/bf16 dense (624 with sparsity).",
    ),
    PublishedPeak(
        "NVIDIA A100 PCIe 80GB",
        require=("a100", "80gb", "pcie"),
        bandwidth_GB_s=1935.0,
        tflops_fp16=312.0,
        tflops_bf16=312.0,
        confirmed=True,
        note="80 GB HBM2e, 1,935 GB/s; same tensor-core peak as SXM4 (lower power limit, "
        "so sustained clocks may be lower).",
    ),
    PublishedPeak(
        "NVIDIA A100 PCIe 40GB",
        require=("a100", "40gb", "pcie"),
        bandwidth_GB_s=1555.0,
        tflops_fp16=312.0,
        tflops_bf16=312.0,
        confirmed=True,
        note="40 GB HBM2, 1,555 GB/s; same tensor-core peak as SXM4.",
    ),
    PublishedPeak(
        "MetaX C500",
        require=(),
        any_of=("c500", "mxc500"),
        bandwidth_GB_s=1800.0,
        tflops_fp16=280.0,
        tflops_bf16=280.0,
        confirmed=False,
        note="UNCONFIRMED: 64 GB HBM2e, ~1.8 TB/s and ~280 TFLOPS fp16 dense are commonly "
        "quoted but not found in a vendor datasheet; bf16 assumed equal to fp16. "
        "Measure with `fi-attn-peaks --save` (or `python -m fi_attn_bench.device.peaks --save`) "
        "and prefer that.",
    ),
)


def _name_tokens(device_name: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9]+", device_name.lower()))


def find_published(device_name: str) -> PublishedPeak | None:
    """The published-table row a device name matches, or None (first match wins)."""
    tokens = _name_tokens(device_name)
    return next((entry for entry in PUBLISHED_PEAKS if entry.matches(tokens)), None)


def match_published(device_name: str, dtype: str) -> Peaks | None:
    """Published peaks for a ``torch.cuda.get_device_name()`` string, or None."""
    try:
        dtype = normalize_dtype(dtype)
    except ValueError:
        return None
    entry = find_published(device_name)
    if entry is None:
        return None
    return Peaks(device_name, entry.bandwidth_GB_s, entry.tflops(dtype), dtype, SOURCE_PUBLISHED)


# --------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class MeasureSettings:
    """Sizes and repetitions of the two peak measurements."""

    copy_bytes: int
    gemm_n: int
    reps: int
    warmup: int


GPU_SETTINGS = MeasureSettings(copy_bytes=1 << 30, gemm_n=8192, reps=50, warmup=10)
CPU_SETTINGS = MeasureSettings(copy_bytes=16 << 20, gemm_n=256, reps=5, warmup=1)


def _time_samples_ms(fn: Callable[[], object], device, reps: int, warmup: int) -> list[float]:
    """Per-call times in ms: CUDA events on a GPU, perf_counter (no sync needed) on CPU."""
    import torch

    for _ in range(warmup):
        fn()
    if device.type == "cpu":
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return samples
    torch.cuda.synchronize(device)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in events]


def measure_copy_bandwidth(device, settings: MeasureSettings) -> float:
    """Median device-to-device copy rate in GB/s, counting bytes read + written."""
    import torch

    source = torch.empty(settings.copy_bytes, dtype=torch.uint8, device=device)
    source.fill_(1)
    target = torch.empty_like(source)
    samples = _time_samples_ms(lambda: target.copy_(source), device, settings.reps, settings.warmup)
    return 2 * settings.copy_bytes / statistics.median(samples) / 1e6


def measure_gemm_tflops(device, dtype: str, settings: MeasureSettings) -> float:
    """Median dense n x n x n matmul rate in TFLOP/s (2 n^3 FLOPs per call)."""
    import torch

    n = settings.gemm_n
    torch_dtype = getattr(torch, normalize_dtype(dtype))
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=torch_dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    samples = _time_samples_ms(
        lambda: torch.matmul(a, b, out=out), device, settings.reps, settings.warmup
    )
    return 2 * n**3 / statistics.median(samples) / 1e9


def device_name(device="cuda") -> str:
    """The name peaks are keyed by: torch.cuda.get_device_name() or 'cpu'."""
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    return torch.cuda.get_device_name(device)


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def measure_peaks(
    device="cuda", dtype="bfloat16", settings: MeasureSettings | None = None
) -> Peaks:
    """Measure copy bandwidth and dense GEMM rate on ``device`` (a GPU, or slowly the CPU)."""
    import torch

    device = torch.device(device)
    if settings is None:
        settings = CPU_SETTINGS if device.type == "cpu" else GPU_SETTINGS
    bandwidth = measure_copy_bandwidth(device, settings)
    tflops = measure_gemm_tflops(device, dtype, settings)
    source = f"{SOURCE_MEASURED_PREFIX} {_today()}"
    return Peaks(device_name(device), bandwidth, tflops, normalize_dtype(dtype), source)


# --------------------------------------------------------------------------- cache


def cache_path() -> Path:
    """``$FI_ATTN_BENCH_CACHE/peaks.json``, else ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    directory = os.environ.get(CACHE_ENV)
    if directory:
        return Path(directory) / CACHE_FILE_NAME
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fi-attn-bench" / CACHE_FILE_NAME


def _cache_key(device: str, dtype: str) -> str:
    return f"{device}|{normalize_dtype(dtype)}"


def _read_cache(path: Path) -> dict[str, dict]:
    """Entries of the cache file; a missing, unreadable or foreign file reads as empty."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_FORMAT_VERSION:
        return {}
    entries = data.get("peaks")
    return entries if isinstance(entries, dict) else {}


def load_cached(device_name: str, dtype: str) -> Peaks | None:
    """Cached peaks of this device and dtype, or None (also for a corrupt entry)."""
    entry = _read_cache(cache_path()).get(_cache_key(device_name, dtype))
    if not isinstance(entry, dict):
        return None
    try:
        return Peaks.from_json(entry)
    except (KeyError, TypeError, ValueError):
        return None


def save_cached(peaks: Peaks) -> None:
    """Add or replace the entry of ``peaks`` in the cache file (atomic rename)."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = _read_cache(path)
    entries[_cache_key(peaks.device, peaks.dtype)] = peaks.to_json()
    text = json.dumps({"version": CACHE_FORMAT_VERSION, "peaks": entries}, indent=2, sort_keys=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- resolving


def resolve_peaks(
    device_name: str,
    dtype: str,
    *,
    bandwidth_override: float | None = None,
    tflops_override: float | None = None,
) -> Peaks | None:
    """Peaks to divide by: override > cache (measured) > published; None when unknown.

    An override of one number keeps the other from the cache or the table (NaN when
    neither knows it); the source then reads ``"override; <other source>"``.
    """
    dtype = normalize_dtype(dtype)
    base = load_cached(device_name, dtype) or match_published(device_name, dtype)
    if bandwidth_override is None and tflops_override is None:
        return base
    if bandwidth_override is not None and tflops_override is not None:
        source = SOURCE_OVERRIDE
    else:
        source = f"{SOURCE_OVERRIDE}; {base.source}" if base else SOURCE_OVERRIDE
    nan = float("nan")
    return Peaks(
        device_name,
        bandwidth_override
        if bandwidth_override is not None
        else (base.bandwidth_GB_s if base else nan),
        tflops_override if tflops_override is not None else (base.tflops if base else nan),
        dtype,
        source,
    )


def _percent(value, peak: float) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(value) and value >= 0 and math.isfinite(peak) and peak > 0):
        return None
    return 100.0 * value / peak


def roofline_columns(bandwidth_GB_s, tflops, peaks: Peaks | None) -> dict[str, float]:
    """``{"pct_peak_bw": ..., "pct_peak_tflops": ...}`` for one row; {} without peaks.

    A percentage is left out when the row's value or the peak is unknown. Values
    above ``PLAUSIBLE_PCT_LIMIT`` are returned as they are: flagging them is the
    summary's job.
    """
    if peaks is None:
        return {}
    pairs = (
        ("pct_peak_bw", bandwidth_GB_s, peaks.bandwidth_GB_s),
        ("pct_peak_tflops", tflops, peaks.tflops),
    )
    columns = {}
    for name, value, peak in pairs:
        percent = _percent(value, peak)
        if percent is not None:
            columns[name] = percent
    return columns


# --------------------------------------------------------------------------- CLI


def published_table_markdown() -> str:
    """The published-peaks table as Markdown (GB/s and dense TFLOP/s)."""
    lines = [
        "| device | HBM GB/s | fp16 TFLOP/s | bf16 TFLOP/s | confirmed | note |",
        "|---|---:|---:|---:|---|---|",
    ]
    for entry in PUBLISHED_PEAKS:
        lines.append(
            f"| {entry.name} | {entry.bandwidth_GB_s:,.0f} | {entry.tflops_fp16:,.0f} | "
            f"{entry.tflops_bf16:,.0f} | {'yes' if entry.confirmed else 'no'} | {entry.note} |"
        )
    return "\n".join(lines)


def _number(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _share(value: float, published: Peaks | None, field: str) -> str:
    if published is None:
        return "n/a"
    return f"{100.0 * value / getattr(published, field):.0f}%"


def measured_table_markdown(
    measured: Sequence[Peaks], settings: MeasureSettings, torch_version: str
) -> str:
    """Markdown table of measured peaks next to the published ones."""
    lines = [
        "| device | dtype | copy GB/s (read+write) | GEMM TFLOP/s | % of published GB/s "
        "| % of published TFLOP/s | date | torch |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for peaks in measured:
        published = match_published(peaks.device, peaks.dtype)
        date = peaks.source.removeprefix(SOURCE_MEASURED_PREFIX).strip()
        lines.append(
            f"| {peaks.device} | {peaks.dtype} | {peaks.bandwidth_GB_s:,.0f} | "
            f"{_number(peaks.tflops)} | {_share(peaks.bandwidth_GB_s, published, 'bandwidth_GB_s')} "
            f"| {_share(peaks.tflops, published, 'tflops')} | {date} | {torch_version} |"
        )
    lines.append("")
    lines.append(
        f"Copy: {settings.copy_bytes / 2**20:,.0f} MiB device-to-device, bytes counted "
        f"twice (read + write). GEMM: {settings.gemm_n}^3 dense matmul, 2 n^3 FLOPs. "
        f"Median of {settings.reps} calls after {settings.warmup} warm-up calls"
        f"{', CUDA events' if measured and measured[0].device != 'cpu' else ''}."
    )
    return "\n".join(lines)


def _settings(asked: PeaksRequest, is_cpu: bool) -> MeasureSettings:
    settings = CPU_SETTINGS if is_cpu else GPU_SETTINGS
    if asked.copy_mib is not None:
        settings = replace(settings, copy_bytes=asked.copy_mib << 20)
    if asked.gemm_n is not None:
        settings = replace(settings, gemm_n=asked.gemm_n)
    if asked.reps is not None:
        settings = replace(settings, reps=asked.reps)
    if min(settings.copy_bytes, settings.gemm_n, settings.reps) < 1:
        raise ValueError("--copy-mib, --gemm-n and --reps must be at least 1")
    return settings


def _gpu_missing(device: str) -> str | None:
    """Why ``device`` cannot be measured, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        return str(exc)
    if kind == "cpu":
        return None
    if not torch.cuda.is_available():
        return "no GPU visible to torch (torch.cuda.is_available() is False); use --device cpu"
    return None


def _run(asked: PeaksRequest) -> int:
    if asked.published_only or asked.show:
        print(published_table_markdown())
        print()
    if asked.published_only:
        return 0
    missing = _gpu_missing(asked.device)
    if missing:
        print(f"{prog()}: error: {missing}", file=sys.stderr)
        return 2
    import torch

    device = torch.device(asked.device)
    settings = _settings(asked, device.type == "cpu")
    bandwidth = measure_copy_bandwidth(device, settings)
    name = device_name(device)
    measured = []
    for dtype in dict.fromkeys(normalize_dtype(d) for d in asked.dtypes):
        tflops = measure_gemm_tflops(device, dtype, settings)
        measured.append(Peaks(name, bandwidth, tflops, dtype, f"measured {_today()}"))
    table = measured_table_markdown(measured, settings, torch.__version__)
    print(table)
    if asked.markdown is not None:
        asked.markdown.parent.mkdir(parents=True, exist_ok=True)
        asked.markdown.write_text(f"# Measured peaks: {name}\n\n{table}\n", encoding="utf-8")
    if asked.save:
        for peaks in measured:
            save_cached(peaks)
        print(f"\nsaved to {cache_path()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: 0 on success, 2 for unusable arguments or no GPU."""
    asked = parse_peaks_command_line(argv)
    try:
        return _run(asked)
    except ValueError as exc:
        print(f"{prog()}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
