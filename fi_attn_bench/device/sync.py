"""Which device a call runs on when none is named, and waiting for it."""

from __future__ import annotations

import torch


def default_device(device=None) -> torch.device:
    """``device`` as a torch.device; CUDA (or MetaX MACA) when one exists, else the CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the device (torch.cuda covers CUDA and MetaX MACA); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
