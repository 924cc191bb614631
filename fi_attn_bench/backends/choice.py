"""Which kind of implementation and device a run uses: FlashInfer when it imports and a GPU
exists, else the PyTorch reference."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fi_attn_bench.errors import UsageError


def _import_flashinfer():
    return importlib.import_module("flashinfer")


@dataclass(frozen=True)
class Probe:
    """How the harness looks at the machine (tests replace it)."""

    cuda_available: Callable[[], bool] = torch.cuda.is_available
    import_flashinfer: Callable[[], object] = _import_flashinfer


@dataclass(frozen=True)
class ImplKindChoice:
    """What ``--backend`` resolved to: the implementation kind (flashinfer or torch) and device."""

    impl_kind: str
    device: torch.device
    flashinfer: object = None  # the imported module when impl_kind is flashinfer
    note: str = ""  # one line saying why auto fell back to torch


def _parse_device(text: str | None, has_gpu: bool) -> torch.device | None:
    if text is None:
        return None
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"invalid --device {text!r}: {exc}") from None
    if device.type not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda, cuda:N or cpu, got {text!r}")
    if device.type == "cuda" and not has_gpu:
        raise UsageError(
            f"--device {text} but torch sees no GPU (torch.cuda.is_available() is False)"
        )
    return device


def _try_flashinfer(probe: Probe) -> tuple[object, str]:
    try:
        return probe.import_flashinfer(), ""
    except Exception as exc:  # noqa: BLE001 - any import failure means "cannot run"
        return None, f"FlashInfer cannot be imported ({type(exc).__name__}: {exc})"


def resolve_impl_kind(
    requested: str, device_text: str | None, probe: Probe, asked_by: str = ""
) -> ImplKindChoice:
    """auto -> flashinfer when it imports and a GPU exists, else torch (with a note).
    ``asked_by``: the option that asked for FlashInfer, named in errors (default --backend)."""
    has_gpu = bool(probe.cuda_available())
    device = _parse_device(device_text, has_gpu)
    gpu = torch.device("cuda") if has_gpu else None
    if requested == "torch":
        return ImplKindChoice("torch", device or gpu or torch.device("cpu"))
    if requested == "flashinfer":
        asked_by = asked_by or "--backend flashinfer"
        if device is not None and device.type == "cpu":
            raise UsageError(f"{asked_by} needs a GPU device, got --device cpu")
        if not has_gpu:
            raise UsageError(f"{asked_by}: no GPU available (torch.cuda.is_available() is False)")
        module, why = _try_flashinfer(probe)
        if module is None:
            raise UsageError(f"{asked_by}: {why}")
        return ImplKindChoice("flashinfer", device or gpu, module)
    if device is not None and device.type == "cpu":
        return ImplKindChoice(
            "torch", device, note="--device cpu: running the torch reference backend"
        )
    if not has_gpu:
        return ImplKindChoice(
            "torch",
            torch.device("cpu"),
            note="no GPU available: running the torch reference backend on the CPU",
        )
    module, why = _try_flashinfer(probe)
    if module is None:
        return ImplKindChoice(
            "torch", device or gpu, note=f"{why}: running the torch reference backend on the GPU"
        )
    return ImplKindChoice("flashinfer", device or gpu, module)


def concrete_device(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
