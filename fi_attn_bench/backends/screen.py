"""A static screen of an ``--impl`` plugin's source for reaching into the harness.

A plugin runs in the harness's process, so it could patch the code that times it or writes
its rows.  Before it is imported, its source is parsed (``ast``, nothing runs) and each
construct below is a finding: by default one warning line each (``FILE:LINE: rule: what``),
under ``--judge`` the plugin's rows fail with the ``source_screen`` check.  The modules beside
the plugin that it imports are screened too.  A screen of text cannot see code built at run
time; it raises the cost of the plain routes.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass

PLUGIN_API = ("fi_attn_bench.backends.impls",)
"""The harness modules a plugin may import: the plugin interface (ImplContext, PluginRun)."""

FORBIDDEN_MODULES = {
    "ctypes": "ctypes",
    "gc": "gc",
    "inspect": "frames",
    "builtins": "builtins",
    "importlib": "sys_modules",
    "torch.profiler": "profiler",
    "torch.autograd.profiler": "profiler",
    "torch._C._profiler": "profiler",
    "torch.overrides": "reflection",
    "torch.utils._python_dispatch": "reflection",
    "multiprocessing": "process",
    "socket": "process",
    "signal": "process",
}
"""Module (or its prefix) -> rule, for ``import`` and ``from ... import``."""

FORBIDDEN_ATTRIBUTES = {
    "modules": ("sys", "sys_modules"),
    "_getframe": ("sys", "frames"),
    "f_back": (None, "frames"),
    "f_globals": (None, "frames"),
    "f_locals": (None, "frames"),
    "gi_frame": (None, "frames"),
    "tb_frame": (None, "frames"),
    "__builtins__": (None, "builtins"),
    "__globals__": (None, "frames"),
    "Event": ("cuda", "cuda_timing"),
    "elapsed_time": (None, "cuda_timing"),
    "profiler": ("torch", "profiler"),
    "_is_profiler_enabled": (None, "profiler"),
    "perf_counter": ("time", "clock"),
    "perf_counter_ns": ("time", "clock"),
    "monotonic": ("time", "clock"),
    "process_time": ("time", "clock"),
    "thread_time": ("time", "clock"),
    "__subclasses__": (None, "reflection"),
    "__code__": (None, "reflection"),
    "__closure__": (None, "reflection"),
    "fork": ("os", "process"),
    "forkpty": ("os", "process"),
    "write": ("os", "process"),
    "dup2": ("os", "process"),
    "kill": ("os", "process"),
    "_exit": ("os", "process"),
}
"""Attribute -> (the name it must follow, or None for any; rule)."""

PATCHED_NAMES = {"synchronize": "cuda_timing", "elapsed_time": "cuda_timing"}
"""Attributes whose assignment is a timing patch whatever they belong to."""

DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "vars"}
"""Builtins that run or reach code the screen cannot read."""


@dataclass(frozen=True)
class Finding:
    """One construct of a plugin's source that reaches into the harness."""

    path: str
    line: int
    rule: str
    what: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.what}"


def plugin_source(where: str) -> str | None:
    """The source file of ``FILE.py`` or ``MODULE``, or None.  Nothing is imported: a dotted
    name is followed through its packages' folders, since ``find_spec`` would run them."""
    if where.endswith(".py") or os.sep in where or "/" in where:
        return where if os.path.isfile(where) else None
    top, *rest = where.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or [])
    found = spec.origin
    for part in rest:
        found = next(
            (
                path
                for folder in folders
                for path in (
                    os.path.join(folder, part + ".py"),
                    os.path.join(folder, part, "__init__.py"),
                )
                if os.path.isfile(path)
            ),
            None,
        )
        if found is None:
            return None
        folders = [os.path.dirname(found)] if found.endswith("__init__.py") else []
    return found if found and found.endswith(".py") and os.path.isfile(found) else None


HARNESS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The harness's own package: a plugin beside it imports it, and it is not the plugin's."""

MAX_FILES = 64
"""How many of a plugin's own modules the screen follows (its file and what it imports)."""


def screen_plugin_files(path: str) -> tuple[Finding, ...]:
    """The findings of a plugin's file and of the modules beside it that it imports (a cheat
    moved into a helper module is screened too), at most ``MAX_FILES`` files."""
    seen: set[str] = set()
    waiting, found = [os.path.abspath(path)], []
    while waiting and len(seen) < MAX_FILES:
        current = waiting.pop()
        if current in seen:
            continue
        seen.add(current)
        found.extend(screen_file(current if current != os.path.abspath(path) else path))
        waiting.extend(_local_imports(current))
    return tuple(found)


def _local_imports(path: str) -> list[str]:
    """The files of the modules ``path`` imports that live in its own folder (or below)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    folder, names = os.path.dirname(path), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, folder) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = folder
            for _ in range(max(node.level - 1, 0)):
                base = os.path.dirname(base)
            module = node.module or ""
            names += [(f"{module}.{alias.name}".strip("."), base) for alias in node.names]
            names.append((module, base))
    files = []
    for name, base in names:
        stem = os.path.join(base, *name.split(".")) if name else base
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            within_harness = os.path.abspath(candidate).startswith(HARNESS + os.sep)
            if os.path.isfile(candidate) and not within_harness:
                files.append(os.path.abspath(candidate))
    return files


def screen_file(path: str) -> tuple[Finding, ...]:
    """The findings of one source file; an unreadable or unparsable file is one finding."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, ValueError) as exc:
        return (Finding(path, 0, "unreadable", f"{type(exc).__name__}: {exc}"),)
    return screen_source(text, path)


def screen_source(text: str, path: str) -> tuple[Finding, ...]:
    """The findings of one file's text (a FIB solution's sources live in JSON, not files)."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as exc:
        return (Finding(path, 0, "unreadable", f"{type(exc).__name__}: {exc}"),)
    return screen_tree(tree, path)


def screen_tree(tree: ast.AST, path: str) -> tuple[Finding, ...]:
    modules = _module_names(tree)
    found: list[Finding] = []
    for node in ast.walk(tree):
        for rule, what in _node_findings(node, modules):
            found.append(Finding(path, getattr(node, "lineno", 0), rule, what))
    return tuple(sorted(set(found), key=lambda f: (f.line, f.rule, f.what)))


def _module_names(tree: ast.AST) -> set[str]:
    """Names bound to imported modules (``import x``, ``import x as y``, ``from a import b``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _module_rule(module: str) -> tuple[str, str] | None:
    if module == "fi_attn_bench" or module.startswith("fi_attn_bench."):
        if module not in PLUGIN_API:
            return "harness", f"imports {module}"
        return None
    for name, rule in FORBIDDEN_MODULES.items():
        if module == name or module.startswith(name + "."):
            return rule, f"imports {module}"
    return None


def _node_findings(node: ast.AST, modules: set[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(node, ast.Import):
        found += [r for alias in node.names if (r := _module_rule(alias.name))]
    elif isinstance(node, ast.ImportFrom) and node.module:
        module_rule = _module_rule(node.module)
        if module_rule is not None:
            found.append(module_rule)
        elif node.module not in PLUGIN_API:  # from torch import profiler
            found += [r for a in node.names if (r := _module_rule(f"{node.module}.{a.name}"))]
    elif isinstance(node, ast.Attribute):
        found += _attribute_findings(node)
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        found += [r for target in targets if (r := _patch_finding(target, modules))]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        found += _call_findings(node, modules)
    elif isinstance(node, ast.Name) and node.id == "__builtins__":
        found.append(("builtins", "reads __builtins__"))
    return found


def _attribute_findings(node: ast.Attribute) -> list[tuple[str, str]]:
    entry = FORBIDDEN_ATTRIBUTES.get(node.attr)
    if entry is None:
        return []
    owner, rule = entry
    base = _dotted(node.value)
    if owner is not None and base.split(".")[-1] != owner:
        return []
    return [(rule, f"uses {base + '.' if base else ''}{node.attr}")]


def _patch_finding(target: ast.AST, modules: set[str]) -> tuple[str, str] | None:
    """An assignment to an attribute of an imported module (``torch.cuda.synchronize =``),
    or to a timing method of anything."""
    if not isinstance(target, ast.Attribute):
        return None
    base = _dotted(target.value)
    if target.attr in PATCHED_NAMES:
        return PATCHED_NAMES[target.attr], f"assigns {base}.{target.attr}"
    if base and base.split(".")[0] in modules:
        return "module_patch", f"assigns {base}.{target.attr}"
    return None


def _call_findings(node: ast.Call, modules: set[str]) -> list[tuple[str, str]]:
    name = node.func.id
    if name in DYNAMIC_CALLS:
        return [("dynamic_code", f"calls {name}()")]
    computed = len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)
    if name in ("getattr", "setattr", "delattr", "hasattr") and computed:
        # a name built at run time ("__glo" + "bals__") hides the attribute from this screen
        return [("dynamic_code", f"calls {name}() with a computed name")]
    if name in ("setattr", "delattr") and node.args:
        base = _dotted(node.args[0])
        if base and base.split(".")[0] in modules:
            return [("module_patch", f"{name}() on {base}")]
    return []


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes, else ""."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""
