"""Cases: filters over their fields, their key, text and per-case seed."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.schema import (
    format_cell,
)

FILTER_OPS: Mapping[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "=": lambda a, b: a == b,
}


_TERM = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|<=|>=|<|>|=)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$"
)


@dataclass(frozen=True)
class FilterTerm:
    name: str
    op: str
    value: float

    def matches(self, case: Mapping[str, int]) -> bool:
        return FILTER_OPS[self.op](float(case[self.name]), self.value)


def parse_filter(text: str, fields: Sequence[str]) -> tuple[FilterTerm, ...]:
    """``batch_size<=16,head_dim=128`` -> terms (all must hold). Raises UsageError."""
    terms = []
    for part in text.split(","):
        match = _TERM.match(part)
        if not match:
            raise UsageError(
                f"malformed filter term {part.strip()!r}: expected FIELD OP NUMBER with OP one of "
                f"== != < <= > >= (valid fields: {', '.join(fields)})"
            )
        name, op, value = match.groups()
        if name not in fields:
            raise UsageError(f"unknown filter field {name!r}; valid fields: {', '.join(fields)}")
        terms.append(FilterTerm(name, op, float(value)))
    return tuple(terms)


def select_cases(cases: Sequence[Mapping[str, int]], terms: Sequence[FilterTerm]) -> list[dict]:
    return [dict(case) for case in cases if all(term.matches(case) for term in terms)]


def case_text(case: Mapping[str, object], fields: Sequence[str]) -> str:
    """``batch_size=16,seq_len_kv=1024,...``: readable, and a valid exact --filter."""
    return ",".join(f"{name}={format_cell(case[name])}" for name in fields)


def case_key(case: Mapping[str, object], fields: Sequence[str]) -> tuple[str, ...]:
    return tuple(format_cell(case.get(name, "")) for name in fields)


def case_seed(seed: int, case: Mapping[str, object], fields: Sequence[str]) -> int:
    """Deterministic per-case seed (stable across processes, unlike hash())."""
    return zlib.crc32(f"{seed}|{case_text(case, fields)}".encode()) & 0x7FFFFFFF
