"""A stand-in for ``pynvml`` (nvidia-ml-py): the entry points the harness calls, each
answering from a table, with the binding's error classes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace


class NVMLError(Exception):
    text = "Unknown Error"

    def __str__(self):
        return self.text


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - the binding's own names
    text = "Not Supported"


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    text = "Function Not Found"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    text = "NVML Shared Library Not Found"


class NVMLError_NotFound(NVMLError):  # noqa: N801
    text = "Not Found"


class Advancing:
    """A counter that moves by ``step`` on every read (``start`` first)."""

    def __init__(self, step: float, start: float = 1_000_000.0):
        self.value, self.step = start - step, step

    def __call__(self, *args):
        self.value += self.step
        return self.value


class FakePynvml:
    """``values`` maps an entry point to a constant, a callable of its arguments after the
    handle, or an exception to raise; an entry point not listed is missing (AttributeError)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound

    def __init__(
        self,
        values: Mapping[str, object] | None = None,
        init_error: Exception | None = None,
        uuids: tuple[str, ...] = ("GPU-abc",),
    ):
        self.values = dict(values or {})
        self.init_error, self.uuids = init_error, uuids
        self.calls: list[tuple[str, tuple]] = []

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:
            raise NVMLError_NotFound()
        return SimpleNamespace(uuid=uuid)

    def __getattr__(self, name: str) -> Callable:
        values = self.__dict__["values"]
        if name not in values:
            raise AttributeError(name)
        entry = values[name]

        def call(handle, *args):
            self.calls.append((name, args))
            if isinstance(entry, BaseException):
                raise entry
            return entry(*args) if callable(entry) else entry

        return call


def loader(module: FakePynvml) -> Callable[[str], FakePynvml]:
    """An ``importlib.import_module`` that finds only this module, as ``pynvml``."""

    def load(name: str):
        if name != "pynvml":
            raise ModuleNotFoundError(name)
        return module

    return load


def missing(name: str):
    raise ModuleNotFoundError(f"No module named {name!r}")
