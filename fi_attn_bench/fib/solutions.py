"""FIB Solutions as ``--impl fib:NAME``: a Python (torch) or Triton solution of the ``--fib``
dataset runs as a plugin, through the same checks, timer and paired ratios as FlashInfer.

The solution is called as FIB calls it: ``run(*inputs)`` in its definition's input order, with
the outputs appended in destination-passing style; the harness checks ``output`` against its
float32 reference.  Its sources are written to a private temporary folder (Triton reads a
kernel's source from its file) and imported from there.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged
from fi_attn_bench.backends.impls import PLUGIN, Impl, ImplContext, PluginRun
from fi_attn_bench.backends.screen import Finding, screen_source
from fi_attn_bench.errors import UsageError
from fi_attn_bench.fib.dataset import Dataset, Solution, read_dataset
from fi_attn_bench.fib.mapping import FileInputs, classify

PREFIX = "fib:"
_SCALES = {
    "gqa_paged decode": decode.scale_of,
    "gqa_paged prefill": prefill_paged.scale_of,
    "gqa_ragged": prefill_ragged.scale_of,
    "mla_paged decode": mla.scale_of,
}
LANGUAGES = ("python", "triton")


def solution_name(text: str) -> tuple[str | None, str] | None:
    """``[NAME=]fib:SOLUTION`` -> (NAME or None, SOLUTION); None for any other --impl."""
    name, sep, target = text.partition("=")
    if not sep or ":" in name or "/" in name:
        name, target = None, text
    target = target.strip()
    if not target.startswith(PREFIX):
        return None
    return (name.strip() if name else None), target[len(PREFIX) :]


def solutions_asked(dataset: Dataset, texts: Sequence[str]) -> list[Solution]:
    """The solutions ``--impl fib:NAME`` names (UsageError for one the dataset lacks)."""
    found = []
    for text in texts:
        parsed = solution_name(text)
        if parsed is None:
            continue
        solution = dataset.solutions.get(parsed[1])
        if solution is None:
            known = ", ".join(sorted(dataset.solutions)) or "none"
            raise UsageError(f"--impl {text}: no solution {parsed[1]!r} in --fib (has: {known})")
        found.append(solution)
    return found


def _write_sources(solution: Solution) -> str:
    folder = tempfile.mkdtemp(prefix="fi-attn-bench-fib-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for relative, content in solution.sources.items():
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    return folder


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _import_entry(solution: Solution) -> Callable:
    if solution.language not in LANGUAGES:
        raise UsageError(
            f"--impl fib:{solution.name}: language {solution.language!r}; "
            f"only {' and '.join(LANGUAGES)} solutions run here"
        )
    if solution.language == "triton" and not triton_installed():
        raise UsageError(f"--impl fib:{solution.name}: a Triton solution; triton is not installed")
    folder = _write_sources(solution)
    sys.path.insert(0, folder)  # the entry file may import its sibling sources
    try:
        module = _load_module(solution, os.path.join(folder, solution.entry_file))
    except Exception as exc:  # noqa: BLE001 - any failure to build is the solution's
        raise UsageError(
            f"--impl fib:{solution.name}: cannot import {solution.entry_file} "
            f"({type(exc).__name__}: {exc})"
        ) from None
    finally:
        sys.path.remove(folder)
    entry = getattr(module, solution.entry_symbol, None)
    if not callable(entry):
        raise UsageError(
            f"--impl fib:{solution.name}: {solution.entry_file} has no function "
            f"{solution.entry_symbol!r}"
        )
    return entry


def _load_module(solution: Solution, path: str) -> ModuleType:
    name = f"fi_attn_bench_fib_{abs(hash((solution.name, path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fib_argument(inputs: object, name: str) -> object:
    """The value FIB passes as input ``name``, read from the script's inputs."""
    table = getattr(inputs, "table", None)
    for holder in (inputs, table):
        if holder is not None and hasattr(holder, name):
            return getattr(holder, name)
    return None


def _outputs(inputs: object, names: Sequence[str]) -> list[torch.Tensor]:
    """Destination tensors: ``output`` shaped as the script's output, ``lse`` in float32."""
    q = getattr(inputs, "q", None)
    if q is None:
        q = inputs.q_nope
    value = getattr(inputs, "v", None)
    dv = value.shape[-1] if value is not None else q.shape[-1]
    made = []
    for name in names:
        if name == "lse":
            made.append(torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device))
        else:
            made.append(torch.empty((*q.shape[:-1], dv), dtype=q.dtype, device=q.device))
    return made


def _first(result: object) -> object:
    return result[0] if isinstance(result, tuple | list) else result


_ENTRIES: dict[str, Callable] = {}  # imported entry points, by solution_key


def solution_key(solution: Solution) -> str:
    """A solution's identity: its name and every source (a changed source is another one)."""
    digest = hashlib.sha1(solution.name.encode())
    for path, content in sorted(solution.sources.items()):
        digest.update(path.encode() + b"\0" + content.encode())
    return digest.hexdigest()


def entry_of(solution: Solution) -> Callable:
    """The solution's entry point, imported once per process."""
    key = solution_key(solution)
    if key not in _ENTRIES:
        _ENTRIES[key] = _import_entry(solution)
    return _ENTRIES[key]


@dataclass(frozen=True)
class SolutionFactory:
    """The plugin factory of a FIB solution: plain data, so it pickles (a worker process
    imports the solution again from its sources)."""

    solution: Solution

    def __call__(self, context: ImplContext) -> PluginRun:
        solution, entry = self.solution, entry_of(self.solution)
        file_inputs = getattr(context.case.get("workload"), "inputs", None)
        if not isinstance(file_inputs, FileInputs):
            raise TypeError(f"fib:{solution.name} runs on --fib cases only")
        definition = file_inputs.mapped.definition
        if definition.name != solution.definition:
            raise TypeError(
                f"fib:{solution.name} implements {solution.definition}, not {definition.name}"
            )
        arguments = [fib_argument(context.inputs, name) for name in definition.inputs]
        if "sm_scale" in definition.inputs:  # the scale plan() and the reference use
            at = list(definition.inputs).index("sm_scale")
            arguments[at] = _SCALES[file_inputs.mapped.kind.label](context.case, context.inputs)
        if not solution.destination_passing_style:
            return PluginRun(run=lambda: _first(entry(*arguments)))
        outputs = _outputs(context.inputs, list(definition.outputs))
        return PluginRun(run=lambda: entry(*arguments, *outputs), output=outputs[0])


def solution_factory(solution: Solution) -> SolutionFactory:
    """The plugin factory of ``solution``, imported now: a broken one is exit 2."""
    entry_of(solution)
    return SolutionFactory(solution)


def impl_resolver(directory: str | None, judge: bool = False) -> Callable[[str], Impl | None]:
    """What ``parse_impls`` asks of an ``--impl`` it does not know: a FIB solution's Impl,
    its Python sources screened as a plugin file is (``--judge``: findings fail its rows)."""

    def resolve(text: str) -> Impl | None:
        parsed = solution_name(text)
        if parsed is None:
            return None
        if not directory:
            raise UsageError(f"--impl {text}: a FIB solution needs --fib DIR")
        dataset = read_dataset(directory)
        (solution,) = solutions_asked(dataset, [text])
        why = classify_solution(dataset, solution)
        if why is not None:
            raise UsageError(f"--impl {text}: {why}")
        name = parsed[0] or f"{PREFIX}{solution.name}"
        target = f"{PREFIX}{solution.name}"
        screened = screen_solution(solution)
        if judge and screened:  # its code never runs: the screen's findings fail its rows
            return Impl(name, PLUGIN, target=target, screened=screened, judged=True)
        factory = solution_factory(solution)
        return Impl(name, PLUGIN, factory=factory, target=target, screened=screened, judged=judge)

    return resolve


def screen_solution(solution: Solution) -> tuple[Finding, ...]:
    """The static screen's findings on a solution's Python sources (Triton kernels included)."""
    return tuple(
        finding
        for relative, text in sorted(solution.sources.items())
        if relative.endswith(".py")
        for finding in screen_source(text, f"{solution.path}:{relative}")
    )


def classify_solution(dataset: Dataset, solution: Solution) -> str | None:
    """Why ``solution`` cannot run here, or None."""
    definition = dataset.definitions.get(solution.definition)
    if definition is None:
        return f"its definition {solution.definition!r} is not in --fib"
    found = classify(definition)
    reason = getattr(found, "reason", None)
    return f"its definition {definition.name} is not measured: {reason}" if reason else None
