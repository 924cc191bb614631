"""FlashInfer API detection: one place that knows how the wrappers' signatures differ.

The benchmark scripts run against two lines of FlashInfer at once: MetaX's 0.2.6-based port
(``jia0713/McFlashInfer``, MACA) and FlashInfer 0.6+ on NVIDIA GPUs.  Their wrapper classes
agree on the essentials but not on the details, for example (read from
``flashinfer/{decode,prefill,mla}.py`` of McFlashInfer and of the 0.6.1 wheel):

* ``BatchDecodeWithPagedKVCacheWrapper.__init__`` takes ``backend`` only in 0.6;
* ``plan()`` takes ``o_data_type`` (and split-KV knobs) only in 0.6; older releases used
  ``data_type`` instead of ``q_data_type``/``kv_data_type`` and ``head_dim`` instead of
  ``head_dim_qk``/``head_dim_vo`` (prefill);
* ``run()`` takes ``q_scale``/``enable_pdl``/... only in 0.6, ``out=`` in both;
* ``BatchMLAPagedAttentionWrapper.plan()`` has twelve required parameters in a fixed
  positional layout in both, plus ``use_profiler`` in 0.6.

So nothing here compares version numbers or names kernels: every decision is taken from
``inspect.signature`` of the installed callable.  ``flashinfer`` itself is imported lazily
by :func:`load_flashinfer`, so the scripts import (and ``--list``) on a machine without it.
A combination that the installed signature cannot express raises :class:`UnsupportedCase`;
errors raised by the library itself are left alone, so their message reaches the failed row.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "head_dim": ("head_dim_qk",),
        "head_dim_qk": ("head_dim",),
        "head_dim_vo": ("head_dim",),
        "q_data_type": ("data_type",),
        "kv_data_type": ("data_type",),
    }
)
"""Parameter renames between FlashInfer releases: our name -> older/newer spellings.

Two of our names may land on one old parameter (``head_dim_qk`` and ``head_dim_vo`` both on
``head_dim``); that is only allowed when their values agree."""

DEFAULT_VALUED = frozenset(
    {
        "pos_encoding_mode",
        "o_data_type",
        "non_blocking",
        "use_fp16_qk_reduction",
        "window_left",
        "logits_soft_cap",
        "use_profiler",
        "return_lse",
    }
)
"""Keyword arguments the scripts pass only to pin a library default (``"NONE"``, None, False,
-1): when the installed signature lacks one, dropping it does not change the computation."""

NEUTRAL_INIT_VALUES: Mapping[str, object] = MappingProxyType(
    {
        "kv_layout": "NHD",
        "use_tensor_cores": False,
        "backend": "auto",
        "use_cuda_graph": False,
    }
)
"""Constructor arguments and the value that equals "not passing it" in every release."""

DIST_NAMES = ("flashinfer-python", "flashinfer", "mcflashinfer", "flashinfer-metax")
"""Distribution names to ask for a version when ``flashinfer.__version__`` says nothing."""


class FlashInferUnavailable(RuntimeError):
    """FlashInfer cannot be used here (not installed, or its import fails)."""


class UnsupportedCase(Exception):
    """The installed FlashInfer's API cannot express this benchmark case."""


def load_flashinfer() -> ModuleType:
    """Import flashinfer, turning any import failure into one clear FlashInferUnavailable."""
    try:
        return importlib.import_module("flashinfer")
    except Exception as exc:  # noqa: BLE001 -- a broken install raises anything
        raise FlashInferUnavailable(
            f"flashinfer cannot be imported ({type(exc).__name__}: {exc})"
        ) from exc


def flashinfer_version(module: ModuleType | None = None) -> str | None:
    """The installed FlashInfer version, for the environment stamp (never for decisions).

    MetaX's port may report ``0.0.0+unknown`` when built without its build metadata; then the
    distribution metadata is asked.  None when neither knows.
    """
    reported = getattr(module, "__version__", None) if module is not None else None
    if reported and "unknown" not in str(reported):
        return str(reported)
    for dist in DIST_NAMES:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return str(reported) if reported else None


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters of a bound method or function (``self`` already excluded)."""
    return inspect.signature(fn).parameters


def _accepts_any_keyword(params: Mapping[str, inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _named(params: Mapping[str, inspect.Parameter]) -> dict[str, inspect.Parameter]:
    """Parameters that can be given by name or position (not ``*args``/``**kwargs``)."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {name: p for name, p in params.items() if p.kind not in variadic}


def _same(a: object, b: object) -> bool:
    """Value equality that never asks a tensor for its truth value."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 -- tensors and other exotic values
        return False


def _target_name(name: str, named: Mapping[str, inspect.Parameter], open_kw: bool) -> str | None:
    """Where ``name`` goes in the installed signature: itself, a known rename, or nowhere."""
    if name in named:
        return name
    for alias in ALIASES.get(name, ()):
        if alias in named:
            return alias
    return name if open_kw else None


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__qualname__', repr(fn))}()"


def _brief(value: object) -> str:
    """A value for an error message: tensors by shape and dtype, never by content."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"<tensor {tuple(shape)} {dtype}>"
    return repr(value)


def plan_kwargs(plan_fn: Callable[..., Any], wanted: Mapping[str, object]) -> dict[str, object]:
    """Map the scripts' argument names onto what the installed ``plan_fn`` accepts.

    Known renames are applied; arguments in DEFAULT_VALUED that the signature lacks are
    dropped; anything else the signature lacks, a rename collision with different values,
    or a required parameter left unset raises UnsupportedCase naming the parameter.
    """
    params = _parameters(plan_fn)
    named, open_kw = _named(params), _accepts_any_keyword(params)
    out: dict[str, object] = {}
    for name, value in wanted.items():
        target = _target_name(name, named, open_kw)
        if target is None:
            if name in DEFAULT_VALUED:
                continue
            raise UnsupportedCase(
                f"installed FlashInfer's {_where(plan_fn)} has no parameter '{name}' "
                f"(needed for {name}={_brief(value)})"
            )
        if target in out and not _same(out[target], value):
            raise UnsupportedCase(
                f"installed FlashInfer's {_where(plan_fn)} takes a single '{target}'; "
                f"cannot pass {name}={_brief(value)} next to {target}={_brief(out[target])}"
            )
        out[target] = value
    _require_complete(plan_fn, named, out)
    return out


def _require_complete(
    fn: Callable[..., Any], named: Mapping[str, inspect.Parameter], given: Mapping[str, object]
) -> None:
    """Raise UnsupportedCase when a parameter without default is not provided."""
    missing = [
        name
        for name, p in named.items()
        if p.default is inspect.Parameter.empty and name not in given
    ]
    if missing:
        raise UnsupportedCase(
            f"installed FlashInfer's {_where(fn)} requires {', '.join(missing)}, "
            "which this benchmark does not know how to provide"
        )


def call(fn: Callable[..., Any], kwargs: Mapping[str, object]) -> Any:
    """Call ``fn`` with ``kwargs``, passing positional-only parameters by position.

    Some builds expose ``plan`` through a C++/ffi layer with positional-only parameters
    (MLA's twelve-argument layout); binding through the signature covers both.
    """
    params = _parameters(fn)
    positional = [name for name, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    args = [kwargs[name] for name in positional if name in kwargs]
    rest = {name: value for name, value in kwargs.items() if name not in positional}
    return fn(*args, **rest)


def run_accepts_out(run_fn: Callable[..., Any]) -> bool:
    """Whether ``run()`` writes into a caller-provided ``out=`` buffer (both 0.2.6 and 0.6)."""
    param = _parameters(run_fn).get("out")
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def run_call(
    run_fn: Callable[..., Any], args: tuple[object, ...], out: object | None
) -> tuple[Callable[[], object], object | None]:
    """The zero-argument ``run`` closure and the buffer it writes (None: returns a new one)."""
    if out is not None and run_accepts_out(run_fn):
        return (lambda: run_fn(*args, out=out)), out
    return (lambda: run_fn(*args)), None


def init_kwargs(cls: type, wanted: Mapping[str, object]) -> dict[str, object]:
    """Constructor keywords the installed class accepts.

    A keyword the constructor lacks is dropped when its value is the neutral one (e.g.
    ``backend="auto"``, ``use_tensor_cores=False``); asking for anything else raises
    UnsupportedCase, since silently ignoring it would benchmark something else.
    """
    params = _parameters(cls.__init__)
    named, open_kw = _named(params), _accepts_any_keyword(params)
    out: dict[str, object] = {}
    for name, value in wanted.items():
        if name in named or open_kw:
            out[name] = value
        elif not _same(NEUTRAL_INIT_VALUES.get(name, object()), value):
            raise UnsupportedCase(
                f"installed FlashInfer's {cls.__name__}() has no parameter '{name}' "
                f"(needed for {name}={_brief(value)})"
            )
    return out


def wrapper_class(flashinfer: ModuleType, name: str) -> type:
    """A wrapper class from the top level or its submodule (MLA lives in ``flashinfer.mla``)."""
    for owner in (
        flashinfer,
        getattr(flashinfer, "mla", None),
        getattr(flashinfer, "prefill", None),
    ):
        cls = getattr(owner, name, None) if owner is not None else None
        if isinstance(cls, type):
            return cls
    raise UnsupportedCase(
        f"installed FlashInfer ({flashinfer_version(flashinfer) or 'unknown version'}) "
        f"has no {name}"
    )


def make_wrapper(flashinfer: ModuleType, name: str, workspace: object, **wanted: object) -> Any:
    """Construct wrapper ``name`` on ``workspace`` with the keywords the install accepts."""
    cls = wrapper_class(flashinfer, name)
    return cls(workspace, **init_kwargs(cls, wanted))


# ---------------------------------------------------------------------------------------
# Wrapper backends (``--impl flashinfer:<backend>``)
# ---------------------------------------------------------------------------------------

CANDIDATE_BACKENDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "BatchDecodeWithPagedKVCacheWrapper": ("auto", "fa2", "trtllm-gen"),
        "BatchPrefillWithPagedKVCacheWrapper": (
            "auto",
            "fa2",
            "fa3",
            "cudnn",
            "trtllm-gen",
            "cutlass",
        ),
        "BatchPrefillWithRaggedKVCacheWrapper": ("auto", "fa2", "fa3", "cudnn", "cutlass"),
        "BatchMLAPagedAttentionWrapper": ("auto", "fa2", "fa3", "cutlass"),
    }
)
"""``backend=`` values of FlashInfer 0.6.x's wrappers (their docstrings), used only when the
installed wrapper's signature and docstring name none: a value outside the list is refused
(exit 2), one inside it that the install cannot run fails its rows with the library's message."""


@dataclass(frozen=True)
class BackendOffer:
    """The ``backend=`` values a wrapper constructor takes, and where that list came from:
    ``signature`` (a Literal annotation), ``docstring`` (the parameter's description),
    ``candidates`` (``CANDIDATE_BACKENDS``) or ``none`` (no ``backend`` parameter: auto only)."""

    values: tuple[str, ...]
    source: str


_BACKEND_DOC = re.compile(r"^\s*backend\s*:.*?$(.*?)(?=^\s*\w+\s*:|\Z)", re.M | re.S)
_DOUBLE_QUOTED = re.compile(r"``([A-Za-z0-9_.-]+)``")


def _documented_backends(cls: type) -> tuple[str, ...]:
    """The ````x```` names in the ``backend :`` paragraph of the constructor's docstring."""
    for doc in (inspect.getdoc(cls.__init__), inspect.getdoc(cls)):
        match = _BACKEND_DOC.search(doc or "")
        if match:
            names = tuple(dict.fromkeys(_DOUBLE_QUOTED.findall(match.group(1))))
            if "auto" in names:
                return names
    return ()


def _literal_values(fn: Callable[..., Any], param: inspect.Parameter | None) -> tuple[str, ...]:
    """The strings of a ``Literal[...]`` annotation of ``backend`` (postponed ones resolved)."""
    if param is None:
        return ()
    try:
        hint = typing.get_type_hints(fn).get("backend", param.annotation)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve names no values
        hint = param.annotation
    return tuple(v for v in typing.get_args(hint) if isinstance(v, str))


def wrapper_backends(cls: type, api: str) -> BackendOffer:
    """What ``backend=`` of the installed wrapper ``cls`` accepts (see ``BackendOffer``)."""
    params = _parameters(cls.__init__)
    param = params.get("backend")
    if param is None and not _accepts_any_keyword(params):
        return BackendOffer(("auto",), "none")
    literal = _literal_values(cls.__init__, param)
    if literal:
        return BackendOffer(tuple(dict.fromkeys(("auto", *literal))), "signature")
    documented = _documented_backends(cls)
    if documented:
        return BackendOffer(documented, "docstring")
    return BackendOffer(CANDIDATE_BACKENDS.get(api, ("auto",)), "candidates")


METAX_BACKENDS = ("auto", "fa2")
"""What MetaX's port (``torch.version.maca`` set) can run: its docstrings name ``fa3`` and
``cutlass`` too, but fa3 is not prebuilt there (plan() would compile Hopper code, on every row)
and ``cutlass`` raises "Unsupported backend" (read from jia0713/McFlashInfer)."""


def platform_offer(offer: BackendOffer, maca: bool) -> BackendOffer:
    """``offer`` cut down to what the platform runs: ``METAX_BACKENDS`` on MetaX."""
    if not maca:
        return offer
    values = tuple(v for v in offer.values if v in METAX_BACKENDS) or ("auto",)
    return BackendOffer(values, f"{offer.source}, MetaX: {'/'.join(METAX_BACKENDS)} only")


def resolved_backend(wrapper: object) -> str:
    """The backend a wrapper built with ``auto`` chose, where it keeps it (0.6's ``_backend``
    after plan()); empty when it does not say."""
    value = getattr(wrapper, "_backend", None)
    return value if isinstance(value, str) and value != "auto" else ""
