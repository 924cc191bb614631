"""Serving-shaped batches: per-request lengths, their distributions and the batch-spec grammar.

Pure and torch-free.  A ``Batch`` is a tuple of ``RequestShape(q_len, kv_len)``; ``kv_len``
counts every cached token the request attends to, its own new ``q_len`` tokens included
(FlashInfer's and vLLM's convention), so ``q_len <= kv_len``.

Lengths are drawn on the CPU with Python's ``random.Random`` (Mersenne Twister) seeded from
the run's ``--seed`` and the spec text, so the same spec and seed give the same batch on any
machine.  Grammar (README, "Serving-shaped batches")::

    spec     := term ('+' term)*
    term     := COUNT 'd' '@' LENGTHS               decode: q_len 1 over LENGTHS cached tokens
              | COUNT 'p' LENGTHS ['@' LENGTHS]     prefill chunk of LENGTHS tokens over a
                                                    context of LENGTHS (default: the chunk)
    LENGTHS  := NUMBER | NAME ':' PARAMS            a fixed length or a distribution
    NUMBER   := DIGITS ['k' | 'm']                  k = 1024, m = 1048576

e.g. ``8d@4k+2p512@2k`` or ``64d@lognormal:median=1k,sigma=1.0,min=16,max=32k``.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fi_attn_bench.errors import UsageError

MAX_KV_LEN = 1 << 20
"""Longest request (1,048,576 cached tokens): past every model context in use today."""
MAX_REQUESTS = 1 << 16
"""Most requests in one batch (65,536)."""
MAX_TOTAL_KV_TOKENS = 1 << 26
"""Most cached tokens in one batch (67,108,864: 128 GiB of fp16 K+V at 4 x 128 heads)."""

UNITS = {"": 1, "k": 1024, "m": 1 << 20}


class WorkloadError(UsageError):
    """A malformed spec, distribution or workload line (exit 2, before any GPU work)."""


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestShape:
    """One request: ``q_len`` new query tokens attending to ``kv_len`` cached tokens."""

    q_len: int
    kv_len: int


@dataclass(frozen=True)
class BatchShape:
    """The summary of a batch written to the workload registry columns."""

    num_requests: int
    total_q_tokens: int
    total_kv_tokens: int
    kv_len_min: int
    kv_len_mean: float
    kv_len_max: int

    def columns(self) -> dict[str, object]:
        return dict(vars(self))


@dataclass(frozen=True)
class Batch:
    """The requests of one ``run()``, in order."""

    requests: tuple[RequestShape, ...]

    @classmethod
    def of(cls, q_lens: Sequence[int], kv_lens: Sequence[int]) -> Batch:
        return cls(tuple(RequestShape(q, kv) for q, kv in zip(q_lens, kv_lens, strict=True)))

    @classmethod
    def uniform(cls, num_requests: int, q_len: int, kv_len: int) -> Batch:
        return cls((RequestShape(q_len, kv_len),) * num_requests)

    @property
    def q_lens(self) -> list[int]:
        return [r.q_len for r in self.requests]

    @property
    def kv_lens(self) -> list[int]:
        return [r.kv_len for r in self.requests]

    def shape(self) -> BatchShape:
        kv = self.kv_lens
        return BatchShape(
            num_requests=len(kv),
            total_q_tokens=sum(self.q_lens),
            total_kv_tokens=sum(kv),
            kv_len_min=min(kv),
            kv_len_mean=sum(kv) / len(kv),
            kv_len_max=max(kv),
        )


def check_batch(batch: Batch, where: str) -> Batch:
    """Raise WorkloadError (naming ``where``) unless ``batch`` is within the documented limits."""
    n = len(batch.requests)
    if n == 0:
        raise WorkloadError(f"{where}: a batch needs at least one request")
    if n > MAX_REQUESTS:
        raise WorkloadError(f"{where}: {n} requests, more than the limit {MAX_REQUESTS}")
    for i, r in enumerate(batch.requests):
        if not 1 <= r.kv_len <= MAX_KV_LEN:
            raise WorkloadError(f"{where}: request {i}: kv_len {r.kv_len} not in 1..{MAX_KV_LEN}")
        if not 1 <= r.q_len <= r.kv_len:
            raise WorkloadError(
                f"{where}: request {i}: q_len {r.q_len} not in 1..kv_len {r.kv_len}"
            )
    total = sum(batch.kv_lens)
    if total > MAX_TOTAL_KV_TOKENS:
        raise WorkloadError(
            f"{where}: {total} cached tokens, more than the limit {MAX_TOTAL_KV_TOKENS}"
        )
    return batch


def uniform_twin(batch: Batch) -> Batch:
    """The uniform batch with as many requests and the same total query and KV tokens.

    Totals rarely divide evenly: the first ``total % n`` requests get one token more (query
    and KV alike, so ``q_len <= kv_len`` still holds).
    """
    n = len(batch.requests)
    shape = batch.shape()
    q, q_extra = divmod(shape.total_q_tokens, n)
    kv, kv_extra = divmod(shape.total_kv_tokens, n)
    return Batch.of([q + (i < q_extra) for i in range(n)], [kv + (i < kv_extra) for i in range(n)])


@dataclass(frozen=True)
class Workload:
    """A varied-length batch as a case carries it: its identity label and its requests.

    ``str()`` is the label, so the case's ``workload`` cell, key and seed text use it;
    ``source`` is the command-line option that rebuilds it (for repro commands); ``inputs``,
    where set, builds the case's inputs from a file (``inputs(settings)``: a FlashInfer-Bench
    workload's tensors) instead of the script's random ones.
    """

    label: str
    batch: Batch = field(compare=False)
    source: tuple[str, ...] = field(default=(), compare=False)
    inputs: Callable[..., object] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.label


# ---------------------------------------------------------------------------------------
# Distributions
# ---------------------------------------------------------------------------------------


Rng = random.Random


@dataclass(frozen=True)
class Fixed:
    """Every request ``value`` tokens."""

    value: int
    random = False

    def draw(self, rng: Rng, n: int) -> list[int]:
        return [self.value] * n


@dataclass(frozen=True)
class Uniform:
    """Uniform integers in ``[lo, hi]`` (both included)."""

    lo: int
    hi: int
    random = True

    def draw(self, rng: Rng, n: int) -> list[int]:
        return [rng.randint(self.lo, self.hi) for _ in range(n)]


@dataclass(frozen=True)
class LogNormal:
    """``exp(N(ln median, sigma))`` rounded, clipped to ``[min, max]``."""

    median: int
    sigma: float
    min: int
    max: int
    random = True

    def draw(self, rng: Rng, n: int) -> list[int]:
        mu = math.log(self.median)
        raw = (round(rng.lognormvariate(mu, self.sigma)) for _ in range(n))
        return [min(self.max, max(self.min, x)) for x in raw]


@dataclass(frozen=True)
class Bimodal:
    """``long`` tokens with probability ``p_long``, else ``short`` (short chats, long documents)."""

    short: int
    long: int
    p_long: float
    random = True

    def draw(self, rng: Rng, n: int) -> list[int]:
        return [self.long if rng.random() < self.p_long else self.short for _ in range(n)]


@dataclass(frozen=True)
class Pareto:
    """Long tail: ``min * Pareto(alpha)`` rounded, clipped to ``max`` (smaller alpha, longer tail)."""

    min: int
    alpha: float
    max: int
    random = True

    def draw(self, rng: Rng, n: int) -> list[int]:
        return [min(self.max, round(self.min * rng.paretovariate(self.alpha))) for _ in range(n)]


@dataclass(frozen=True)
class Explicit:
    """The listed lengths, in order, repeated when the count is larger."""

    values: tuple[int, ...]
    random = False

    def draw(self, rng: Rng, n: int) -> list[int]:
        return [self.values[i % len(self.values)] for i in range(n)]


Distribution = Fixed | Uniform | LogNormal | Bimodal | Pareto | Explicit


@dataclass(frozen=True)
class _Param:
    kind: str  # "length" | "float" | "probability"
    default: object = None


_PARAMS: Mapping[str, tuple[Callable[..., Distribution], Mapping[str, _Param]]] = {
    "fixed": (Fixed, {"value": _Param("length")}),
    "uniform": (Uniform, {"lo": _Param("length"), "hi": _Param("length")}),
    "lognormal": (
        LogNormal,
        {
            "median": _Param("length"),
            "sigma": _Param("float"),
            "min": _Param("length", 1),
            "max": _Param("length", MAX_KV_LEN),
        },
    ),
    "bimodal": (
        Bimodal,
        {"short": _Param("length"), "long": _Param("length"), "p_long": _Param("probability")},
    ),
    "pareto": (
        Pareto,
        {"min": _Param("length"), "alpha": _Param("float"), "max": _Param("length", MAX_KV_LEN)},
    ),
}
DISTRIBUTION_NAMES = (*_PARAMS, "list")

_NUMBER = re.compile(r"([0-9]+)([kKmM]?)$")
_FLOAT = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$|\.[0-9]+$")


def _error(text: str, pos: int, message: str) -> WorkloadError:
    return WorkloadError(f"{message} at position {pos + 1} of {text!r}")


def _length(full: str, token: str, pos: int) -> int:
    match = _NUMBER.match(token)
    if not match:
        raise _error(full, pos, f"expected a length like 512, 4k or 1m, got {token!r}")
    value = int(match.group(1)) * UNITS[match.group(2).lower()]
    if not 1 <= value <= MAX_KV_LEN:
        raise _error(full, pos, f"length {token} not in 1..{MAX_KV_LEN}")
    return value


def _number(full: str, token: str, pos: int, kind: str) -> float:
    if not _FLOAT.match(token):
        raise _error(full, pos, f"expected a number, got {token!r}")
    value = float(token)
    if kind == "probability" and not 0.0 <= value <= 1.0:
        raise _error(full, pos, f"probability {token} not in 0..1")
    return value


def _pieces(text: str, start: int, end: int, sep: str) -> list[tuple[str, int]]:
    """``text[start:end]`` split at ``sep``: (piece, offset of the piece in ``text``)."""
    out, pos = [], start
    for piece in text[start:end].split(sep):
        out.append((piece, pos))
        pos += len(piece) + 1
    return out


def parse_distribution(text: str, start: int = 0, end: int | None = None) -> Distribution:
    """``text[start:end]`` as a length distribution; errors name the position in ``text``."""
    end = len(text) if end is None else end
    body = text[start:end]
    if ":" not in body:
        return Fixed(_length(text, body, start))
    name, _, _ = body.partition(":")
    params_at = start + len(name) + 1
    if name == "fixed" and "=" not in body:
        return Fixed(_length(text, text[params_at:end], params_at))
    if name == "list":
        values = tuple(_length(text, t, p) for t, p in _pieces(text, params_at, end, ","))
        return Explicit(values)
    if name not in _PARAMS:
        raise _error(
            text, start, f"unknown distribution {name!r} (one of {', '.join(DISTRIBUTION_NAMES)})"
        )
    make, params = _PARAMS[name]
    given: dict[str, object] = {}
    for token, pos in _pieces(text, params_at, end, ","):
        key, eq, value = token.partition("=")
        if not eq or key not in params:
            raise _error(
                text, pos, f"{name} takes {', '.join(f'{k}=' for k in params)}; got {token!r}"
            )
        if key in given:
            raise _error(text, pos, f"{key}= given twice")
        kind, value_at = params[key].kind, pos + len(key) + 1
        given[key] = (
            _length(text, value, value_at)
            if kind == "length"
            else _number(text, value, value_at, kind)
        )
    missing = [k for k, p in params.items() if k not in given and p.default is None]
    if missing:
        raise _error(text, start, f"{name} needs {', '.join(f'{k}=' for k in missing)}")
    values = {k: given.get(k, p.default) for k, p in params.items()}
    return _validated(text, start, make(**values))


def _validated(text: str, pos: int, dist: Distribution) -> Distribution:
    bounds = {
        Uniform: lambda d: (d.lo, d.hi),
        LogNormal: lambda d: (d.min, d.max),
        Pareto: lambda d: (d.min, d.max),
        Bimodal: lambda d: (d.short, d.long),
    }.get(type(dist))
    if bounds and bounds(dist)[0] > bounds(dist)[1]:
        lo, hi = bounds(dist)
        raise _error(text, pos, f"lower bound {lo} above upper bound {hi}")
    if isinstance(dist, Pareto) and dist.alpha <= 0:
        raise _error(text, pos, "pareto needs alpha > 0")
    return dist


# ---------------------------------------------------------------------------------------
# Batch specs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """``count`` requests: decode (``q is None``: one query token) or prefill chunks
    (``kv is None``: the context is the chunk itself)."""

    count: int
    q: Distribution | None
    kv: Distribution | None

    def draw(self, rng: Rng) -> list[RequestShape]:
        if self.q is None:
            return [RequestShape(1, kv) for kv in self.kv.draw(rng, self.count)]
        q_lens = self.q.draw(rng, self.count)
        kv_lens = self.kv.draw(rng, self.count) if self.kv is not None else q_lens
        # a drawn context shorter than its chunk is raised to it: the chunk is part of it
        return [RequestShape(q, max(q, kv)) for q, kv in zip(q_lens, kv_lens, strict=True)]


@dataclass(frozen=True)
class BatchSpec:
    """A parsed batch spec; ``draw(seed)`` gives its batch."""

    text: str
    terms: tuple[Term, ...]

    @property
    def random(self) -> bool:
        dists = [d for t in self.terms for d in (t.q, t.kv) if d is not None]
        return any(d.random for d in dists)

    def draw(self, seed: int) -> Batch:
        rng = random.Random(zlib.crc32(f"{seed}|{self.text}".encode()))
        requests = [r for term in self.terms for r in term.draw(rng)]
        return check_batch(Batch(tuple(requests)), f"batch spec {self.text!r}")


_TERM_HEAD = re.compile(r"([0-9]+)([dp])")


def _split_term(text: str, start: int, end: int) -> Term:
    head = _TERM_HEAD.match(text, start, end)
    if not head:
        raise _error(
            text, start, "expected COUNTd@LENGTH (decode) or COUNTpLENGTH[@LENGTH] (prefill)"
        )
    count = int(head.group(1))
    if not 1 <= count <= MAX_REQUESTS:
        raise _error(text, start, f"request count {count} not in 1..{MAX_REQUESTS}")
    at = text.find("@", head.end(), end)
    if head.group(2) == "d":
        if at != head.end():
            raise _error(text, head.end(), "a decode term needs '@LENGTH' right after 'd'")
        return Term(count, None, parse_distribution(text, at + 1, end))
    q_end = at if at >= 0 else end
    if q_end == head.end():
        raise _error(text, head.end(), "a prefill term needs its chunk length after 'p'")
    q = parse_distribution(text, head.end(), q_end)
    kv = parse_distribution(text, at + 1, end) if at >= 0 else None
    if isinstance(q, Fixed) and isinstance(kv, Fixed) and q.value > kv.value:
        raise _error(text, head.end(), f"chunk of {q.value} tokens over a {kv.value}-token context")
    return Term(count, q, kv)


def parse_batch_spec(text: str) -> BatchSpec:
    """``8d@4k+2p512@2k`` -> BatchSpec; WorkloadError names the position of a mistake."""
    if not text.strip():
        raise WorkloadError("empty batch spec: expected e.g. 8d@4k+2p512@2k")
    if text != text.strip() or any(ch.isspace() for ch in text):
        raise _error(text, next(i for i, c in enumerate(text) if c.isspace()), "space in spec")
    terms, total = [], 0
    for piece, pos in _pieces(text, 0, len(text), "+"):
        if not piece:
            raise _error(text, pos, "empty term (two '+' in a row, or one at an end)")
        term = _split_term(text, pos, pos + len(piece))
        total += term.count
        if total > MAX_REQUESTS:
            raise _error(text, pos, f"more than {MAX_REQUESTS} requests in the batch")
        terms.append(term)
    return BatchSpec(text, tuple(terms))


def workload_from_spec(text: str, seed: int) -> Workload:
    """The batch of a spec under ``seed``; its label is the spec (and the seed when the
    spec draws at random and the seed is not 0), so the same spec and seed name the same case."""
    spec = parse_batch_spec(text)
    label = f"{text} seed={seed}" if spec.random and seed else text
    return Workload(label, spec.draw(seed), ("--batch", text))
