"""Fresh input values before every timed call, and checks of sampled timed calls' outputs.

Under the per-call timers (the CPU wall clock), each timed call sees values no earlier call
saw: before it, outside its timing window, all of q (every floating input that is not K/V),
a window of every request's K/V rows (``KvRows``; an input without them is rewritten whole)
and elements at scattered positions of every vector of every request's K/V rows
(``ScatteredElements``) are written in place from a generator seeded by the OS's entropy.  So
an output cache, keyed on pointers, versions or a fingerprint, never hits, a K/V cache kept
by a plugin is stale in every row unless the plugin reads all of K/V, and a kernel that skips
work returns a wrong output.  The outputs of a random sample of timed calls (drawn from the OS's
entropy, not announced: every call gets the same preparation) are compared, after the call
returns and outside its window, with the float32 reference on that call's own values.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fi_attn_bench.cases.inputs import KvRows

WINDOW_SHARE = 16
"""Each request's window is 1/16 of its K/V rows (at least one row): a stale K/V transform
or cached output is wrong on every call, at 1/16 of the K/V bytes written per call."""


@dataclass(frozen=True)
class SampleRate:
    """Timed call n of a case is checked with probability max(``early`` / n, ``floor``) (at
    most 1):
    about ``early`` * (ln(n) + 1) checks among the first calls, however few the stop rule
    lets run, and a ``floor`` share of the rest, so a cheat kept for the late calls meets
    checks too."""

    early: float
    floor: float

    def chance(self, call: int) -> float:
        return min(1.0, max(self.early / max(call, 1), self.floor))


SAMPLE_RATES = {"default": SampleRate(1.0, 1 / 64), "judge": SampleRate(2.0, 1 / 8)}
"""Per mode (``--judge`` turns the second on)."""


def _generator(device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(int.from_bytes(secrets.token_bytes(8), "little") >> 1)
    return generator


NATIVE_NORMAL = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _normal_(tensor: Tensor, generator: torch.Generator) -> None:
    if tensor.dtype in NATIVE_NORMAL:
        tensor.normal_(generator=generator)
    else:  # fp8 and other storage types: drawn in float32 and converted
        tensor.copy_(torch.randn(tensor.shape, generator=generator, device=tensor.device))


def _randn_like_rows(tensor: Tensor, count: int, generator: torch.Generator) -> Tensor:
    shape, native = (count, *tensor.shape[1:]), tensor.dtype in NATIVE_NORMAL
    dtype = tensor.dtype if native else torch.float32  # fp8: drawn in float32, converted
    drawn = torch.randn(shape, generator=generator, device=tensor.device, dtype=dtype)
    return drawn if native else drawn.to(tensor.dtype)


SCATTERED_PER_VECTOR = 1
"""Each refresh also rewrites this many elements of every vector (the last dim: one token's
head, or one token's latent) of every request's K/V rows, at a position drawn anew per vector
and call: a fingerprint of k of a vector's d elements sees the change with probability k/d, so
a plugin that keeps K/V between calls must read all of it to know which rows are still valid.
One suffices: the stale K/V of a one-element-per-head fingerprint put 23-60 % of the output
out of tolerance after a single refresh (docs/VALIDATION.md), and more would cost more time
between timed calls."""

SCATTER_CHUNK = 1 << 22
"""At most about this many elements are written per step, which bounds the step's temporaries
(long offsets and positions, values) at ~100 MiB however large the cache."""


def _as_storage_bits(tensor: Tensor) -> Tensor:
    """``tensor``, or, for a storage type index_copy_ may lack (fp8), its bits as an integer."""
    if tensor.dtype in NATIVE_NORMAL:
        return tensor
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return tensor.view(bits[tensor.element_size()])


@dataclass(frozen=True)
class ScatteredElements:
    """One K/V tensor's per-call scattered rewrite: ``SCATTERED_PER_VECTOR`` elements at random
    positions of each vector (the last dim) of each row a request reads, whatever the strides."""

    tensor: Tensor
    flat: Tensor  # a 1-D view over the tensor's storage, from its first element
    rows: Tensor  # long, each used row's first element in ``flat``
    within: Tensor  # long, each vector's first element within a row
    width: int  # the last dim's size
    step: int  # the last dim's stride

    @classmethod
    def of(cls, tensor: Tensor, rows: Tensor) -> ScatteredElements | None:
        if tensor.dim() < 2 or tensor.numel() == 0 or rows.numel() == 0:
            return None
        device = tensor.device
        used = torch.unique(rows.to(device, torch.long))
        within = torch.zeros(1, dtype=torch.long, device=device)
        for size, stride in zip(tensor.shape[1:-1], tensor.stride()[1:-1], strict=True):
            steps = torch.arange(size, dtype=torch.long, device=device) * stride
            within = (within[:, None] + steps[None, :]).reshape(-1)
        span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
        flat = _as_storage_bits(tensor).as_strided((span,), (1,), tensor.storage_offset())
        return cls(
            tensor, flat, used * tensor.stride(0), within, tensor.shape[-1], tensor.stride(-1)
        )

    def rewrite(self, generator: torch.Generator) -> None:
        """Writes new values at new positions (drawn from ``generator``)."""
        count = self.within.numel() * SCATTERED_PER_VECTOR  # elements per row
        chunk = max(1, SCATTER_CHUNK // count)  # rows per step
        for first in range(0, self.rows.numel(), chunk):
            rows = self.rows[first : first + chunk]
            shape = (rows.numel(), self.within.numel(), SCATTERED_PER_VECTOR)
            # repeated positions within a vector are harmless: that element is written twice
            positions = torch.randint(self.width, shape, generator=generator, device=rows.device)
            if self.step != 1:
                positions.mul_(self.step)
            positions.add_(self.within[None, :, None]).add_(rows[:, None, None])
            offsets = positions.reshape(-1)
            values = _randn_like_rows(self.tensor.reshape(-1), offsets.numel(), generator)
            self.flat.index_copy_(0, offsets, _as_storage_bits(values))


@dataclass(frozen=True)
class RowWindows:
    """One ``KvRows``'s per-call windows: a random start within each request's rows, the
    same number of rows every call (so a call's preparation launches the same work)."""

    kv: KvRows
    base: Tensor  # float, each request's first position in ``kv.rows``
    span: Tensor  # float, how many window starts each request has
    request: Tensor  # long, per slot: its request
    offset: Tensor  # long, per slot: its row within the window
    rows: Tensor  # long, ``kv.rows``

    @classmethod
    def of(cls, kv: KvRows) -> RowWindows | None:
        indptr = kv.indptr.detach().to("cpu", torch.long).tolist()
        starts, spans, request, offset = [], [], [], []
        for begin, end in zip(indptr[:-1], indptr[1:], strict=True):
            length = end - begin
            if length <= 0:
                continue
            window = max(1, length // WINDOW_SHARE)
            starts.append(begin)
            spans.append(length - window + 1)
            request.extend([len(starts) - 1] * window)
            offset.extend(range(window))
        if not starts:
            return None
        device = kv.rows.device
        return cls(
            kv,
            torch.tensor(starts, dtype=torch.float64, device=device),
            torch.tensor(spans, dtype=torch.float64, device=device),
            torch.tensor(request, dtype=torch.long, device=device),
            torch.tensor(offset, dtype=torch.long, device=device),
            kv.rows.long(),
        )

    def rewrite(self, generator: torch.Generator) -> tuple[Tensor, list[Tensor]]:
        """Writes the windows; the rows and the values written into each tensor."""
        draw = torch.rand(
            self.base.shape, generator=generator, device=self.base.device, dtype=torch.float64
        )  # float64: u * span stays below span, so no window runs past its request
        first = draw.mul_(self.span).add_(self.base).long()  # the whole part: a start
        rows = self.rows[first[self.request] + self.offset]
        written = []
        for tensor in self.kv.tensors:
            values = _randn_like_rows(tensor, rows.numel(), generator)
            tensor.index_copy_(0, rows, values)
            written.append(values)
        return rows, written


LAST_WRITER: dict[int, int] = {}
"""id(input tensor) -> id(the refresher that wrote it last): implementations of a head-to-head
case share their inputs, and each one's refreshes land on the others' values."""


@dataclass
class Refresher:
    """Writes new values into a case's inputs in place (see the module docstring)."""

    whole: list[Tensor]
    windows: list[RowWindows]
    generator: torch.Generator
    scattered: list[ScatteredElements] = field(default_factory=list)
    kept: list[Tensor] = field(default_factory=list)  # the values the last refresh wrote
    rows: list[tuple[Tensor, list[Tensor]]] = field(default_factory=list)

    @classmethod
    def of(cls, inputs: object, tensors: list[Tensor], device: torch.device) -> Refresher:
        """``tensors``: the inputs' floating tensors; those ``inputs.kv_rows()`` names get
        windows, the rest are rewritten whole."""
        windows: list[RowWindows] = []
        scattered: list[ScatteredElements] = []
        kv_rows = getattr(inputs, "kv_rows", None)
        kv = kv_rows() if callable(kv_rows) else None
        if isinstance(kv, KvRows):
            found = RowWindows.of(kv)
            windows = [found] if found is not None else []
            if found is not None:
                spread = (ScatteredElements.of(t, found.rows) for t in kv.tensors)
                scattered = [each for each in spread if each is not None]
        windowed = {id(t) for w in windows for t in w.kv.tensors}
        whole = [t for t in tensors if id(t) not in windowed]
        made = cls(whole, windows, _generator(device), scattered)
        made.claim()  # the inputs' values are this one's to check until another writes
        return made

    def tensors(self) -> tuple[Tensor, ...]:
        return (*self.whole, *(t for w in self.windows for t in w.kv.tensors))

    def claim(self) -> None:
        for tensor in self.tensors():
            LAST_WRITER[id(tensor)] = id(self)

    def __call__(self) -> None:
        self.claim()
        if not self.kept:
            self.kept = [torch.empty_like(tensor) for tensor in self.whole]
        for tensor, kept in zip(self.whole, self.kept, strict=True):
            _normal_(kept, self.generator)
            tensor.copy_(kept)
        for each in self.scattered:  # first: the windows' rows then hold what overwritten() reads
            each.rewrite(self.generator)
        self.rows = [window.rewrite(self.generator) for window in self.windows]

    def wrote_last(self) -> bool:
        """Whether no other refresher (another implementation's, on inputs they share) wrote
        into these inputs since this one last did."""
        return all(LAST_WRITER.get(id(t)) == id(self) for t in self.tensors())

    def overwritten(self) -> str | None:
        """Which input no longer holds what the last refresh wrote (run() wrote into its
        inputs), or None; None before the first refresh (a timer that ran none)."""
        if not self.kept and not self.rows:
            return None
        for index, (tensor, kept) in enumerate(zip(self.whole, self.kept, strict=True)):
            if not torch.equal(tensor, kept):
                return f"input tensor {index} (rewritten whole, shape {tuple(tensor.shape)})"
        for window, (rows, written) in zip(self.windows, self.rows, strict=True):
            for tensor, values in zip(window.kv.tensors, written, strict=True):
                if not torch.equal(tensor.index_select(0, rows), values):
                    return f"a K/V tensor of shape {tuple(tensor.shape)} (its refreshed rows)"
        return None


def active_modes() -> list[str]:
    """The torch function and dispatch modes left on: a mode sees every torch call, the
    harness's reads of an output included, and can run deferred work in them."""
    found = []
    if torch._C._len_torch_function_stack() > 0:
        found.append("a torch function mode (torch.overrides.TorchFunctionMode) is on")
    if torch._C._len_torch_dispatch_stack() > 0:
        found.append("a torch dispatch mode (TorchDispatchMode) is on")
    return found


@dataclass(frozen=True)
class SampledFailure:
    """A sampled timed call whose output disagreed with the reference on its own values."""

    message: str
    late: bool  # the output turned right a moment later (work left on a stream or thread)
    check: str = ""  # the check it fails, where not the output's (inputs_written)


@dataclass
class FreshCalls:
    """run() for a per-call timer: ``before_call`` refreshes the inputs, the timer times
    ``__call__``, ``after_call`` checks the output when the call was drawn.  Outside the
    window, both hooks run for every call alike (the draw is made after the call)."""

    run: Callable[[], object]
    refresh: Callable[[], None]
    check: Callable[[object], SampledFailure | None]  # the call's result -> why it is wrong
    rate: SampleRate | None = SAMPLE_RATES["default"]  # None: only the last call, after the loop
    draw: Callable[[], float] = field(
        default_factory=lambda: random.Random(secrets.randbits(64)).random
    )
    on_first: Callable[[], None] = lambda: None  # before the first call's refresh
    on_call: Callable[[float], None] = lambda _wall_s: None  # the CPU times' bookkeeping
    calls: int = 0
    checked: int = 0
    failure: SampledFailure | None = None
    result: object = None  # the last call's
    started: float = 0.0
    harness_s: float = 0.0  # spent refreshing and checking, outside the timing windows

    def before_call(self) -> None:
        if self.calls == 0:
            self.on_first()
        begun = time.perf_counter()
        self.refresh()
        self.started = time.perf_counter()
        self.harness_s += self.started - begun

    def __call__(self) -> object:
        self.calls += 1
        self.result = self.run()
        return self.result

    def after_call(self) -> None:
        self.on_call(time.perf_counter() - self.started)
        result = self.result  # kept: the last call's is checked after the loop
        if self.rate is None or self.failure is not None:
            return
        if self.draw() >= self.rate.chance(self.calls):
            return
        self.checked += 1
        begun = time.perf_counter()
        self.failure = self.check(result)
        self.harness_s += time.perf_counter() - begun
