"""NVML through ``nvidia-ml-py`` (the NVIDIA-maintained ``pynvml`` module), optional.

Installed with the ``[nvidia]`` extra.  Every read is best-effort: without the module, its
driver library or the device, ``open_nvml_device`` says why in ``NvmlOpened.reason``, and a
counter the device does not keep reads as None (``read``), so a column stays empty instead
of failing a case.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

NVML_MODULE = "pynvml"
INSTALL_HINT = "pip install nvidia-ml-py, or fi-attn-bench[nvidia]"


@dataclass(frozen=True)
class NvmlDevice:
    """The started ``pynvml`` module and the handle of one device in it."""

    module: ModuleType
    handle: object

    def call(self, function: str, *args):
        """``module.function(handle, *args)``; raises what the binding raises."""
        return getattr(self.module, function)(self.handle, *args)

    def read(self, function: str, *args):
        """``call``, or None where the binding, driver or device cannot answer."""
        return self.read_or_reason(function, *args)[0]

    def read_or_reason(self, function: str, *args) -> tuple[object, str]:
        """(value, "") or (None, why it could not be read)."""
        try:
            return self.call(function, *args), ""
        except Exception as exc:  # noqa: BLE001 - NVMLError and its subclasses, or the binding itself failing
            if is_missing_function(exc):
                return None, f"{function} is missing from this nvidia-ml-py or driver"
            return None, f"{function}: {nvml_error_text(exc)}"


@dataclass(frozen=True)
class NvmlOpened:
    """What opening a device gave: the device, or None and the reason."""

    device: NvmlDevice | None
    reason: str = ""


def is_missing_function(exc: BaseException) -> bool:
    """The binding or the driver lacks the function (an older one), as opposed to a call
    that failed."""
    return isinstance(exc, AttributeError) or type(exc).__name__ == "NVMLError_FunctionNotFound"


def nvml_error_text(exc: BaseException) -> str:
    """A short text for a binding error ("Not Supported", "Insufficient Permissions")."""
    text = str(exc) or type(exc).__name__
    return text if text.strip() else type(exc).__name__


def open_nvml_device(
    uuid: str, load: Callable[[str], ModuleType] = importlib.import_module
) -> NvmlOpened:
    """NVML's handle of the device with this UUID (``GPU-...``), or why there is none."""
    try:
        module = load(NVML_MODULE)
    except ImportError:
        return NvmlOpened(None, f"nvidia-ml-py is not installed ({INSTALL_HINT})")
    try:
        module.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver library, driver not loaded
        return NvmlOpened(None, f"NVML did not start: {nvml_error_text(exc)}")
    try:
        handle = module.nvmlDeviceGetHandleByUUID(uuid)
    except Exception as exc:  # noqa: BLE001 - a UUID NVML does not know (e.g. a MIG slice)
        return NvmlOpened(None, f"NVML does not know device {uuid}: {nvml_error_text(exc)}")
    return NvmlOpened(NvmlDevice(module, handle))
