"""Implementations measured per case (``--impl``): FlashInfer with a wrapper backend, the
torch reference, or a user plugin; parsed and validated before any GPU work.

Plugin contract (``package.module:factory`` or ``path/to/file.py:factory``)::

    def factory(context: ImplContext) -> PluginRun: ...

``context`` holds the case, the resolved settings and the inputs the script built for the
case (the very tensors FlashInfer reads; see the script's ``make_inputs``).  The factory
returns a ``PluginRun``: ``run`` (no arguments; called many times, must launch the same work
each time), optionally ``plan`` (called once untimed, once timed: ``plan_ms``) and ``output``
(the tensor ``run`` writes; without it, ``run``'s return value is checked).  The harness
checks the output against the script's float32 reference and times ``run`` with the same
timer, L2 flush, bytes and FLOPs as FlashInfer.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType, ModuleType

import torch

from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.backends.screen import Finding, plugin_source, screen_plugin_files
from fi_attn_bench.cases.inputs import prepare_case, timed_ms
from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared, Settings
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.schema import SOURCE_SCREEN
from fi_attn_bench.timing.integrity import IntegrityError

FLASHINFER, TORCH, PLUGIN = "flashinfer", "torch", "plugin"


@dataclass(frozen=True)
class ImplContext:
    """What a plugin factory is given for one case."""

    api: str  # the wrapper the script benchmarks, e.g. BatchDecodeWithPagedKVCacheWrapper
    case: Mapping[str, int]
    settings: Settings
    inputs: object  # the script's inputs for this case (e.g. DecodeInputs: q, caches, table)


@dataclass(frozen=True)
class PluginRun:
    """What a plugin factory returns (see the module docstring)."""

    run: Callable[[], object]
    plan: Callable[[], object] | None = None
    output: torch.Tensor | None = None


@dataclass(frozen=True)
class Impl:
    """One ``--impl``: its name (the CSV ``impl`` column), kind and what it needs."""

    name: str
    kind: str  # FLASHINFER, TORCH or PLUGIN
    wrapper_backend: str = "auto"  # FlashInfer's backend= (kind FLASHINFER)
    factory: Callable[[ImplContext], PluginRun] | None = None  # kind PLUGIN
    target: str = ""  # what --impl named: flashinfer:fa2, torch, examples/x.py:make
    screened: tuple[Finding, ...] = ()  # the static screen's findings on a plugin's source
    judged: bool = False  # --judge: a plugin with findings is not imported; its rows fail

    @property
    def checked(self) -> bool:
        """The reference is not checked against itself."""
        return self.kind != TORCH


class ScreenFailed(IntegrityError):
    """--judge: the plugin's source reaches into the harness (``backends.screen``)."""

    def __init__(self, findings: Sequence[Finding]):
        described = "; ".join(finding.describe() for finding in findings)
        super().__init__(
            SOURCE_SCREEN,
            f"the plugin's source reaches into the harness, so --judge does not run it: "
            f"{described}",
        )


DEFAULT_IMPL = Impl(FLASHINFER, FLASHINFER, target=FLASHINFER)
TORCH_IMPL = Impl(TORCH, TORCH, target=TORCH)


def _split_name(text: str) -> tuple[str | None, str]:
    """``NAME=TARGET`` gives the impl a name of its own (the same target twice, A/A)."""
    name, sep, target = text.partition("=")
    if sep and name and ":" not in name and "/" not in name:
        return name.strip(), target.strip()
    return None, text.strip()


def load_factory(target: str) -> Callable[[ImplContext], PluginRun]:
    """Import ``module:factory`` or ``file.py:factory`` and check it can take one context;
    raises UsageError naming the problem."""
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise UsageError(f"--impl {target!r}: a plugin is MODULE:FACTORY or FILE.py:FACTORY")
    module = _import_plugin(where, target)
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"--impl {target!r}: {where} has no attribute {attr!r}")
    if not callable(factory):
        raise UsageError(f"--impl {target!r}: {attr} is a {type(factory).__name__}, not callable")
    try:
        inspect.signature(factory).bind(object())
    except TypeError as exc:
        raise UsageError(
            f"--impl {target!r}: the factory must take one argument (an ImplContext): {exc}"
        ) from None
    except ValueError:  # no signature to read (a builtin): calling it will tell
        pass
    return factory


def check_factory_source(target: str) -> None:
    """What ``load_factory`` checks, read from the plugin's source without running any of it
    (its code runs in the plugin worker only): the module or file exists and binds the
    factory's name at its top level; raises UsageError naming the problem."""
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise UsageError(f"--impl {target!r}: a plugin is MODULE:FACTORY or FILE.py:FACTORY")
    path = _plugin_source(where, target)
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(
            f"--impl {target!r}: cannot read {path} ({type(exc).__name__}: {exc})"
        ) from None
    if attr not in _top_level_names(tree):
        raise UsageError(f"--impl {target!r}: {where} has no attribute {attr!r}")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:  # assignments, and names bound under if/try at the top level
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    names.add(inner.id)
                elif isinstance(inner, (ast.FunctionDef, ast.ClassDef)):
                    names.add(inner.name)
    return names


def _plugin_source(where: str, target: str) -> str:
    """The plugin's source file, found as import would find it but without importing (a
    package's ``__init__`` does not run either)."""
    if _names_a_file(where):
        if not os.path.isfile(where):
            raise UsageError(f"--impl: no such plugin file {where!r}")
        return where
    _let_import_from_cwd()
    path, found = None, None
    for part in where.split("."):
        found = importlib.machinery.PathFinder.find_spec(part, path)
        if found is None:
            break
        path = found.submodule_search_locations
    origin = getattr(found, "origin", None)
    if found is None or not origin or not os.path.isfile(origin) or not origin.endswith(".py"):
        raise UsageError(
            f"--impl {target!r}: cannot import {where} (ModuleNotFoundError: no Python "
            f"source of {where!r} on the module search path)"
        )
    return origin


def _names_a_file(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def default_impl_name(target: str) -> str:
    """A plugin's name when --impl gives none: ``FILE.py:FACTORY`` as the file's stem and the
    factory (the same however the path was typed), ``MODULE:FACTORY`` as given."""
    where, _, attr = target.rpartition(":")
    if where and _names_a_file(where):
        return f"{os.path.splitext(os.path.basename(where))[0]}:{attr}"
    return target


def _import_plugin(where: str, target: str) -> ModuleType:
    try:
        if _names_a_file(where):
            return _import_file(where)
        _let_import_from_cwd()
        return importlib.import_module(where)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise UsageError(
            f"--impl {target!r}: cannot import {where} ({type(exc).__name__}: {exc})"
        ) from None


def _let_import_from_cwd() -> None:
    """``MODULE:FACTORY`` resolves from the current directory too, as ``python -m`` would: a
    script's own directory, not the user's, heads sys.path.  Appended (installed modules
    win) and left there, since the plugin may import its neighbours later."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.append(here)


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise UsageError(f"--impl: no such plugin file {path!r}")
    name = f"fi_attn_bench_plugin_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _flashinfer_backend(backend: str, api: str, flashinfer: ModuleType | None) -> str:
    """Check ``backend`` against what the installed wrapper offers (exit 2 listing them)."""
    if flashinfer is None:
        raise UsageError(f"--impl flashinfer:{backend}: FlashInfer is not available here")
    try:
        cls = fc.wrapper_class(flashinfer, api)
    except fc.UnsupportedCase as exc:
        raise UsageError(f"--impl flashinfer:{backend}: {exc}") from None
    documented = fc.wrapper_backends(cls, api)
    offer = fc.platform_offer(documented, on_metax())
    if backend in documented.values and backend not in offer.values:
        raise UsageError(
            f"--impl flashinfer:{backend}: not offered on MetaX (torch.version.maca is set): "
            f"the port runs {', '.join(f'flashinfer:{v}' for v in offer.values)} only"
        )
    if backend not in offer.values:
        how = {
            "none": f"the installed {api}() takes no backend argument",
            "candidates": "FlashInfer 0.6's documented list; the install does not name its own",
        }.get(offer.source, f"from the installed {api}'s {offer.source}")
        available = ", ".join(f"flashinfer:{v}" for v in offer.values)
        raise UsageError(
            f"unknown FlashInfer backend {backend!r} for {api}; available: {available} ({how})"
        )
    return backend


def on_metax() -> bool:
    """Whether torch is MetaX's MACA build (``torch.version.maca`` set)."""
    return bool(getattr(torch.version, "maca", None))


def parse_impl(
    text: str,
    api: str,
    flashinfer: ModuleType | None,
    judge: bool = False,
    isolated: bool = False,
) -> Impl:
    """One ``--impl`` value (see the module docstring); raises UsageError.  ``isolated``: a
    plugin's source is checked without importing it (it runs in the plugin worker)."""
    name, target = _split_name(text)
    if target in (FLASHINFER, "flashinfer:auto") and flashinfer is None:
        raise UsageError(f"--impl {target}: FlashInfer is not available here (no GPU or import)")
    if target == FLASHINFER:
        return Impl(name or FLASHINFER, FLASHINFER, target=target)
    if target == TORCH:
        return Impl(name or TORCH, TORCH, target=target)
    if target.startswith(f"{FLASHINFER}:"):
        backend = _flashinfer_backend(target.split(":", 1)[1], api, flashinfer)
        return Impl(name or target, FLASHINFER, wrapper_backend=backend, target=target)
    if ":" not in target:
        raise UsageError(
            f"--impl {text!r}: expected flashinfer, flashinfer:BACKEND, torch, MODULE:FACTORY "
            "or FILE.py:FACTORY (optionally NAME=...)"
        )
    screened = screen_plugin(target)
    name = name or default_impl_name(target)
    if judge and screened:  # its code never runs: the screen's findings fail its rows
        return Impl(name, PLUGIN, target=target, screened=screened, judged=True)
    if isolated:
        check_factory_source(target)
        return Impl(name, PLUGIN, target=target, screened=screened, judged=judge)
    factory = load_factory(target)
    return Impl(name, PLUGIN, factory=factory, target=target, screened=screened, judged=judge)


def screen_plugin(target: str) -> tuple[Finding, ...]:
    """The static screen's findings on a plugin's source, read before it is imported."""
    path = plugin_source(target.rpartition(":")[0])
    return screen_plugin_files(path) if path is not None else ()


def names_flashinfer(text: str) -> bool:
    """Whether an ``--impl`` value asks for FlashInfer (so the run needs it)."""
    target = _split_name(text)[1]
    return target == FLASHINFER or target.startswith(f"{FLASHINFER}:")


def parse_impls(
    texts: Sequence[str],
    api: str,
    flashinfer: ModuleType | None,
    default: str,
    other: Callable[[str], Impl | None] = lambda text: None,
    judge: bool = False,
    isolated: bool = False,
) -> tuple[Impl, ...]:
    """Every ``--impl`` (``default`` when none), with unique names; ``other`` resolves the
    targets a higher floor knows (``fib:NAME``: a FlashInfer-Bench solution), else None."""
    impls = tuple(
        other(text) or parse_impl(text, api, flashinfer, judge, isolated)
        for text in (texts or (default,))
    )
    names = [impl.name for impl in impls]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(
            f"--impl {', '.join(twice)} given twice; name each one (NAME=TARGET, e.g. "
            f"a={impls[names.index(twice[0])].target} b={impls[names.index(twice[0])].target})"
        )
    return impls


def baseline_index(impls: Sequence[Impl], name: str | None) -> int:
    """Position of ``--baseline-impl`` (default: the first ``--impl``)."""
    if name is None:
        return 0
    names = [impl.name for impl in impls]
    if name not in names:
        raise UsageError(
            f"--baseline-impl {name!r} is none of the --impl names: {', '.join(names)}"
        )
    return names.index(name)


def impl_settings(impl: Impl, settings: Settings) -> Settings:
    """The settings a script's prepare() gets for ``impl``."""
    impl_kind = TORCH if impl.kind == TORCH else FLASHINFER
    return replace(settings, impl_kind=impl_kind, wrapper_backend=impl.wrapper_backend)


def prepare_impl(
    spec: BenchmarkSpec,
    impl: Impl,
    case: Mapping[str, int],
    settings: Settings,
    shared: Prepared | None,
) -> Prepared:
    """``impl``'s Prepared for ``case``; ``shared``: an earlier impl's, whose inputs (the
    case plan's, built once) are handed over.

    A plugin needs the script's inputs and reference: without ``shared`` they come from the
    script's torch path (which builds no wrapper)."""
    inputs = shared.inputs if shared is not None else None
    if impl.kind != PLUGIN:
        return prepare_case(spec, case, impl_settings(impl, settings), inputs)
    if impl.judged and impl.screened:
        raise ScreenFailed(impl.screened)
    if shared is None or shared.inputs is None:
        shared = prepare_case(spec, case, impl_settings(TORCH_IMPL, settings), inputs)
    if shared.inputs is None:
        raise TypeError(f"{spec.script} does not hand its inputs to plugins (Prepared.inputs)")
    context = ImplContext(spec.api, MappingProxyType(dict(case)), settings, shared.inputs)
    factory = impl.factory or load_factory(impl.target)  # isolated parse, in-process timer
    made = factory(context)
    if not isinstance(made, PluginRun):
        raise TypeError(
            f"plugin {impl.target} returned {type(made).__name__}, not a PluginRun "
            "(fi_attn_bench.backends.impls.PluginRun(run, plan=None, output=None))"
        )
    if made.output is not None and type(made.output) is not torch.Tensor:
        raise TypeError(plain_tensor_needed(impl.target, made.output))
    plan_ms = 0.0
    if made.plan is not None:
        plan_ms = timed_ms(made.plan, settings.device, warm_first=True)
    return Prepared(
        run=made.run,
        output=made.output,
        reference=shared.reference,
        plan_ms=plan_ms,
        inputs=shared.inputs,
    )


def plain_tensor_needed(target: str, found: object) -> str:
    """Why an output that is not a plain ``torch.Tensor`` is refused: a subclass runs code of
    its own (``__torch_function__``) whenever the harness reads it, so its work could wait
    until it is checked."""
    return (
        f"plugin {target}'s output is a {type(found).__module__}.{type(found).__qualname__}, "
        "not a plain torch.Tensor (a subclass runs its own code when the harness reads it)"
    )


def backend_column(impl: Impl) -> str | None:
    """The row's ``backend`` column: flashinfer or torch; empty for a plugin."""
    return None if impl.kind == PLUGIN else impl.kind


def flashinfer_needed(impls: Sequence[Impl]) -> bool:
    return any(impl.kind == FLASHINFER for impl in impls)
