"""The package's shape: no import cycle between files or between folders, no import that runs back
up a floor, modules and functions short enough to read at once.  ``importlib.import_module``
counts as an import: a literal name, or a name the module spells out where it imports by name."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fi_attn_bench"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
FLAT_PARSER_BUILDERS = {"build_parser"}  # one add_argument after another, nothing to untangle
# The rooms (folders and top-level modules of the package) by floor: a module imports from its
# own room or from a room on its floor or below, never from one above.
FLOORS = {
    "errors": 0,
    "wording": 0,
    "program": 0,
    "fi_attn_bench": 1,  # the package's __init__: its version
    "results": 1,
    "device": 1,
    "timing": 2,
    "cases": 2,
    "backends": 3,
    "apis": 4,  # one module per API, and their registry
    "sweep": 4,
    "summarizer": 4,
    "fib": 4,  # FlashInfer-Bench datasets in, solutions as plugins, traces out
    "command_line": 5,
    "command_line_groups": 5,
    "suite_command_line": 5,
    "suite_record": 5,
    "doctor_command_line": 5,
    "doctor": 5,
    "history": 5,
    "suite": 6,
    "seed_api": 7,  # the seed's names, re-exported for the faces: nothing imports it
}


# The modules that read a program's command line; the parsed arguments stop there, every
# other module takes the frozen request they build.
COMMAND_LINE_MODULES = {
    "fi_attn_bench.command_line",
    "fi_attn_bench.command_line_groups",
    "fi_attn_bench.suite_command_line",
    "fi_attn_bench.doctor_command_line",
    "fi_attn_bench.device.peaks_command_line",
    "fi_attn_bench.summarizer.command_line",
    "fi_attn_bench.summarizer.pr_verdict_command_line",
    "fi_attn_bench.history.command_line",
    "fi_attn_bench.history.bisect_command_line",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def calls_import_module(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    return name in {"import_module", "__import__"}


def imported_modules_of_source(source: str, known: set[str]) -> set[str]:
    """Package modules that ``source`` imports anywhere (module level or inside functions),
    ``importlib.import_module`` included: where the module calls it, every string constant
    that names a package module counts (a literal argument, or a table of names it looks up)."""
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(name for name in names if name in known)
    if any(calls_import_module(node) for node in ast.walk(tree)):
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        found.update(name for name in strings if isinstance(name, str) and name in known)
    return found


def imported_modules(path: Path, known: set[str]) -> set[str]:
    return imported_modules_of_source(path.read_text(), known)


def room(module: str) -> str:
    """The folder (or top-level module) of the package that ``module`` lives in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (a package's own parents left out); parsed
    once per session (the package does not change under the tests), so callers only read it."""
    modules = package_modules()
    known = set(modules)
    return {
        name: {
            m for m in imported_modules(path, known) if m != name and not name.startswith(m + ".")
        }
        for name, path in modules.items()
    }


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for name, imported in graph.items():
        rooms.setdefault(room(name), set()).update(room(m) for m in imported)
    return {name: targets - {name} for name, targets in rooms.items()}


def upward_imports(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """``a -> b`` for each import from a room to a room on a higher floor."""
    return sorted(
        f"{name} -> {m}"
        for name, imported in graph.items()
        for m in imported
        if floors[room(m)] > floors[room(name)]
    )


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_accepts_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_module_counts_as_an_import_by_literal_or_by_a_table_of_names():
    known = {"pkg.a", "pkg.b", "pkg.c"}
    literal = "import importlib\ndef f():\n    return importlib.import_module('pkg.a')\n"
    table = (
        "from importlib import import_module\nNAMES = {'x': 'pkg.b'}\nimport_module(NAMES['x'])\n"
    )
    plain = "NAME = 'pkg.c'\n"  # a string alone, with no import_module call, is no import
    assert imported_modules_of_source(literal, known) == {"pkg.a"}
    assert imported_modules_of_source(table, known) == {"pkg.b"}
    assert imported_modules_of_source(plain, known) == set()


def test_rooms_and_floors_find_a_folder_cycle_and_an_upward_import():
    graph = {"fi_attn_bench.low.x": {"fi_attn_bench.high.y"}, "fi_attn_bench.high.y": set()}
    assert upward_imports(graph, {"low": 0, "high": 1}) == [
        "fi_attn_bench.low.x -> fi_attn_bench.high.y"
    ]
    graph["fi_attn_bench.high.z"] = {"fi_attn_bench.low.x"}  # no file cycle, a folder cycle
    assert find_cycle(graph) is None
    assert find_cycle(room_graph(graph)) == ["high", "low", "high"]


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycle_between_folders():
    rooms = room_graph(import_graph())
    assert find_cycle(rooms) is None, " -> ".join(find_cycle(rooms))


def test_every_room_has_a_floor_and_no_import_runs_back_up_one():
    graph = import_graph()
    assert {room(name) for name in graph} == set(FLOORS)
    assert upward_imports(graph, FLOORS) == []


# What ``sweep/`` may import from planning: the plan itself (``SweepPlan``), through the
# package's front door, never the modules that build it.
PLAN_FRONT = {"fi_attn_bench.plan"}
# The imports from history into the summarizer that remain until reading and rendering are
# shared floors below both; the list may only shrink, and nothing may join it.
HISTORY_BORROWS_TODAY = {
    "fi_attn_bench.history.bisect_stats -> fi_attn_bench.summarizer.rank_test",
    "fi_attn_bench.history.command_line -> fi_attn_bench.summarizer.output",
    "fi_attn_bench.history.command_line -> fi_attn_bench.summarizer.terminal",
    "fi_attn_bench.history.reading -> fi_attn_bench.summarizer.loading",
    "fi_attn_bench.history.report -> fi_attn_bench.summarizer",  # its renderers module, by name
    "fi_attn_bench.history.report -> fi_attn_bench.summarizer.markdown_text",
    "fi_attn_bench.history.report -> fi_attn_bench.summarizer.model",
    "fi_attn_bench.history.report -> fi_attn_bench.summarizer.renderers",
}


def imports_between(graph: dict[str, set[str]], source: str, target: str) -> set[str]:
    """``a -> b`` for each import from room ``source`` into room ``target``."""
    return {
        f"{name} -> {m}"
        for name, imported in graph.items()
        if room(name) == source
        for m in imported
        if room(m) == target
    }


def internal_imports(graph: dict[str, set[str]], source: str, target: str, front: set[str]):
    """The imports from room ``source`` into room ``target`` past its ``front`` modules."""
    return sorted(
        edge
        for edge in imports_between(graph, source, target)
        if edge.split(" -> ")[1] not in front
    )


def test_internal_imports_and_imports_between_on_a_made_up_graph():
    graph = {
        "fi_attn_bench.sweep.run": {"fi_attn_bench.plan", "fi_attn_bench.plan.cases"},
        "fi_attn_bench.plan": {"fi_attn_bench.plan.cases"},
        "fi_attn_bench.plan.cases": {"fi_attn_bench.results.schema"},
    }
    assert internal_imports(graph, "sweep", "plan", PLAN_FRONT) == [
        "fi_attn_bench.sweep.run -> fi_attn_bench.plan.cases"
    ]
    assert internal_imports(graph, "plan", "sweep", set()) == []
    assert imports_between(graph, "plan", "results") == {
        "fi_attn_bench.plan.cases -> fi_attn_bench.results.schema"
    }


def test_sweep_imports_only_the_plan_from_planning():
    assert internal_imports(import_graph(), "sweep", "plan", PLAN_FRONT) == []


def test_the_summarizer_never_imports_history():
    assert sorted(imports_between(import_graph(), "summarizer", "history")) == []


def test_history_borrows_nothing_new_from_the_summarizer():
    borrowed = imports_between(import_graph(), "history", "summarizer")
    assert sorted(borrowed - HISTORY_BORROWS_TODAY) == []


def test_no_module_of_the_package_imports_the_seed_names():
    """``seed_api`` is the door for the faces: it re-exports, nothing inside depends on it."""
    graph = import_graph()
    assert sorted(n for n, imported in graph.items() if "fi_attn_bench.seed_api" in imported) == []
    seed_api = ast.parse((PACKAGE / "seed_api.py").read_text())
    assert all(
        isinstance(node, (ast.ImportFrom, ast.Assign, ast.Expr)) for node in seed_api.body
    ), "seed_api defines nothing: it imports and lists names"


def test_every_module_and_function_is_short_enough_to_read_at_once():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and node.name not in FLAT_PARSER_BUILDERS:
                    too_long.append(f"{path.relative_to(PACKAGE)}:{node.name}: {length} lines")
    assert not too_long, "; ".join(too_long)


def parsed_command_line_uses(source: str) -> list[str]:
    """Where ``source`` touches a parsed command line: an argparse import, a ``Namespace``,
    an attribute read off ``args``; one ``line: what`` each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            found.append(f"{node.lineno}: import argparse")
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append(f"{node.lineno}: from argparse import")
        elif isinstance(node, ast.Attribute) and node.attr == "Namespace":
            found.append(f"{node.lineno}: Namespace")
        elif isinstance(node, ast.Name) and node.id == "Namespace":
            found.append(f"{node.lineno}: Namespace")
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "args":
            found.append(f"{node.lineno}: args.{node.attr}")
    return found


def test_parsed_command_line_uses_finds_argparse_namespace_and_args():
    source = (
        "import argparse\nfrom argparse import Namespace\n"
        "def f(args: argparse.Namespace):\n    return args.output, kwargs.x, SimpleNamespace()\n"
    )
    assert parsed_command_line_uses(source) == [
        "1: import argparse",
        "2: from argparse import",
        "3: Namespace",
        "4: args.output",
    ]
    assert parsed_command_line_uses("def f(asked):\n    return asked.output\n") == []


def test_the_parsed_command_line_stays_in_the_command_line_modules():
    """Every other module of the package, and the faces, take a frozen request."""
    faces = sorted(ROOT.glob("bench_*.py")) + [ROOT / "summarize_results.py"]
    outside = {
        name: path for name, path in package_modules().items() if name not in COMMAND_LINE_MODULES
    }
    outside.update({path.stem: path for path in faces})
    assert COMMAND_LINE_MODULES <= set(package_modules())
    uses = [
        f"{name}:{use}"
        for name, path in sorted(outside.items())
        for use in parsed_command_line_uses(path.read_text())
    ]
    assert uses == []
