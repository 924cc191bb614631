"""The output check: the contest judge's rule (rtol = atol = 1.6e-2, >= 99 % of elements within
tolerance, none beyond 8x); :func:`poison_` makes an unwritten output fail it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

_CHECK_CHUNK_ELEMS = 1 << 24
"""check_output compares in flat slices of this many elements so that checking an 8 GB
prefill output does not need several more 8 GB temporaries."""


@dataclass(frozen=True)
class Tolerance:
    """The contest judge's rule: an element is ok if ``|a - e| <= atol + rtol * |e|``; an output
    passes if at least ``min_pass_frac`` of its elements are ok and none is more than
    ``max_violation_factor`` times its tolerance away."""

    rtol: float = 1.6e-2
    atol: float = 1.6e-2
    min_pass_frac: float = 0.99
    max_violation_factor: float = 8.0

    def __post_init__(self) -> None:
        if self.rtol < 0 or self.atol < 0:
            raise ValueError("rtol and atol must be >= 0")
        if not 0.0 <= self.min_pass_frac <= 1.0:
            raise ValueError("min_pass_frac must be in [0, 1]")
        if self.max_violation_factor < 1.0:
            raise ValueError("max_violation_factor must be >= 1")


DEFAULT_TOLERANCE = Tolerance()
"""The judge's defaults; frozen, so safe as a default argument."""


@dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`check_output`; ``message`` is one line a user can act on.

    ``worst_ratio`` is the largest ``|a - e| / (atol + rtol * |e|)``; inf when the output has
    non-finite elements or a different shape (then the other numbers are nan).
    """

    passed: bool
    max_abs_err: float
    mismatch_frac: float
    worst_ratio: float
    message: str


@dataclass(frozen=True)
class _Tally:
    """Running totals over the flat slices of one comparison (positions are flat indices).

    Error statistics cover the elements where both sides are finite; non-finite elements are
    counted apart, with the first position of each kind for the message.
    """

    bad_output: int = 0
    first_bad_output: int = -1
    bad_reference: int = 0
    first_bad_reference: int = -1
    nonfinite: int = 0
    out_of_tol: int = 0
    max_err: float = 0.0
    max_err_at: int = 0
    worst_ratio: float = 0.0
    worst_at: int = 0


def _first(mask: Tensor, offset: int, previous: int) -> int:
    """Flat position of the first True in ``mask`` unless an earlier slice already had one."""
    if previous >= 0 or not bool(mask.any()):
        return previous
    return offset + int(mask.nonzero()[0, 0])


def _tally_slice(tally: _Tally, a: Tensor, e: Tensor, offset: int, tol: Tolerance) -> _Tally:
    """Fold one flat float32 slice of output ``a`` and reference ``e`` into the totals."""
    a_bad, e_bad = ~torch.isfinite(a), ~torch.isfinite(e)
    nonfinite = a_bad | e_bad
    err = (a - e).abs().masked_fill_(nonfinite, 0.0)
    allowed = e.abs().masked_fill_(e_bad, 0.0).mul_(tol.rtol).add_(tol.atol)
    ratio = torch.where(allowed > 0, err / allowed, torch.where(err > 0, math.inf, 0.0))
    err_max, err_at = (float(x) for x in err.max(dim=0))
    ratio_max, ratio_at = (float(x) for x in ratio.max(dim=0))
    tally = replace(
        tally,
        bad_output=tally.bad_output + int(a_bad.sum()),
        first_bad_output=_first(a_bad, offset, tally.first_bad_output),
        bad_reference=tally.bad_reference + int(e_bad.sum()),
        first_bad_reference=_first(e_bad, offset, tally.first_bad_reference),
        nonfinite=tally.nonfinite + int(nonfinite.sum()),
        out_of_tol=tally.out_of_tol + int((err > allowed).sum()),
    )
    if err_max > tally.max_err:
        tally = replace(tally, max_err=err_max, max_err_at=offset + int(err_at))
    if ratio_max > tally.worst_ratio:
        tally = replace(tally, worst_ratio=ratio_max, worst_at=offset + int(ratio_at))
    return tally


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Multi-index of a flat (row-major) position; torch.unravel_index needs torch >= 2.2."""
    index = []
    for size in reversed(shape):
        flat, rem = divmod(flat, size)
        index.append(rem)
    return tuple(reversed(index))


def _fail(message: str, mismatch_frac: float = math.nan) -> CheckResult:
    return CheckResult(False, math.inf, mismatch_frac, math.inf, message)


def check_output(
    actual: Tensor, expected: Tensor, tol: Tolerance = DEFAULT_TOLERANCE
) -> CheckResult:
    """Compare ``actual`` with the float32 ``expected`` by the contest judge's rule.

    Non-finite elements in ``actual`` (a poisoned, unwritten or overflowed output) fail the
    check outright, as does a shape mismatch; a non-finite reference fails too, since nothing
    can be judged against it.  On such failures ``max_abs_err`` and ``worst_ratio`` are inf
    and ``mismatch_frac`` counts the non-finite elements as out of tolerance (nan for a shape
    mismatch).  The comparison runs in flat float32 slices on ``actual``'s device, so checking
    a multi-GB prefill output needs little extra memory.
    """
    shape = tuple(actual.shape)
    if shape != tuple(expected.shape):
        return _fail(f"shape mismatch: output {shape} vs reference {tuple(expected.shape)}")
    total = actual.numel()
    if total == 0:
        return CheckResult(True, 0.0, 0.0, 0.0, "empty output: nothing to compare")
    a_flat, e_flat = actual.reshape(-1), expected.reshape(-1)
    tally = _Tally()
    for start in range(0, total, _CHECK_CHUNK_ELEMS):
        stop = min(start + _CHECK_CHUNK_ELEMS, total)
        a = a_flat[start:stop].float()
        e = e_flat[start:stop].to(device=actual.device, dtype=torch.float32)
        tally = _tally_slice(tally, a, e, start, tol)
    return _verdict(tally, shape, tol)


def _verdict(tally: _Tally, shape: tuple[int, ...], tol: Tolerance) -> CheckResult:
    """Turn the totals into a pass/fail result with a one-line explanation."""
    total = math.prod(shape)
    mismatch_frac = (tally.nonfinite + tally.out_of_tol) / total
    if tally.bad_output:
        return _fail(
            f"{tally.bad_output} of {total} output elements are NaN/inf (first at index "
            f"{_unravel(tally.first_bad_output, shape)}): unwritten (poisoned) or overflowed output",
            mismatch_frac,
        )
    if tally.bad_reference:
        return _fail(
            f"{tally.bad_reference} of {total} reference elements are NaN/inf (first at index "
            f"{_unravel(tally.first_bad_reference, shape)}): the reference cannot judge this case",
            mismatch_frac,
        )
    frac = tally.out_of_tol / total
    enough = total - tally.out_of_tol >= tol.min_pass_frac * total
    bounded = tally.worst_ratio <= tol.max_violation_factor
    head = (
        f"{frac * 100:.3g}% of {total} elements out of tolerance (rtol={tol.rtol:g}, "
        f"atol={tol.atol:g}); max |err| {tally.max_err:.3g} at index {_unravel(tally.max_err_at, shape)}"
    )
    if not enough:
        message = f"{head}; more than the allowed {(1 - tol.min_pass_frac) * 100:.3g}%"
    elif not bounded:
        message = (
            f"{head}; element {_unravel(tally.worst_at, shape)} is {tally.worst_ratio:.3g}x its "
            f"tolerance (limit {tol.max_violation_factor:g}x)"
        )
    else:
        message = f"{head}; within limits"
    return CheckResult(enough and bounded, tally.max_err, frac, tally.worst_ratio, message)


def poison_(tensor: Tensor) -> None:
    """Fill an output buffer so that an unwritten output cannot pass :func:`check_output`.

    Floating (and complex) buffers get NaN; integer buffers, which cannot hold NaN, get the
    dtype's maximum; bool buffers get True.
    """
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.fill_(math.nan)
    elif tensor.dtype == torch.bool:
        tensor.fill_(True)
    else:
        tensor.fill_(torch.iinfo(tensor.dtype).max)
