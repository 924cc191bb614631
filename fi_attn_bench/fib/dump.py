"""FlashInfer's own definition dumps (``FLASHINFER_TRACE_DUMP=1``) made into Definitions that
FlashInfer-Bench loads.

A dump is written from one API call's arguments (flashinfer ``trace/template.py``): the index
tensors a wrapper takes at ``plan()`` and not at ``run()`` have dtype ``"unknown"``, and its
``reference`` is the template's function under its own name (``_gqa_paged_decode_reference``),
where FIB's schema asks for a top-level ``run``.  ``fib_definition`` fixes both and leaves the
rest as it was; a definition FIB already accepts comes back unchanged.
"""

from __future__ import annotations

import ast
import copy

INDEX_DTYPE = "int32"  # FlashInfer's indptrs, page ids and last-page lengths
INDEX_NAMES = ("indptr", "indices", "page_len", "len_arr")
_NO_REFERENCE = (
    "def run(*args, **kwargs):\n    raise NotImplementedError('no reference in the dump')\n"
)


def _top_functions(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]


def _reference(source: object) -> str:
    """The reference with a top-level ``run``: the dump's function, called under that name."""
    if not isinstance(source, str) or not _top_functions(source):
        return _NO_REFERENCE
    names = _top_functions(source)
    if "run" in names:
        return source
    return f"{source}\n\ndef run(*args, **kwargs):\n    return {names[-1]}(*args, **kwargs)\n"


def fib_definition(record: dict) -> dict:
    """``record`` (a dump's or FIB's definition) as a Definition FIB's schema accepts."""
    fixed = copy.deepcopy(record)
    for name, spec in fixed.get("inputs", {}).items():
        is_index = any(part in name for part in INDEX_NAMES)
        if is_index and isinstance(spec, dict) and spec.get("dtype") == "unknown":
            spec["dtype"] = INDEX_DTYPE
    fixed["reference"] = _reference(fixed.get("reference"))
    return fixed
