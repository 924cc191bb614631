"""How often does ``fi-attn-history bisect`` name the right commit?  Seeded trials on generated
plugin repositories whose plugin gets slower at one hidden commit, measured for real.

CPU (default): a repository of 64 commits whose plugin, a small pure-Python decode attention,
does 3 % more work from the hidden commit on (it repeats its kernel about 258 times instead of 250:
real extra work, no sleep; the ratio is calibrated by measurement before the trials).  Each run
is a fresh process that times the plugin's calls with ``time.thread_time`` around each call, as
the harness's CPU timer (``WallTimer``) does, and writes one schema-v1 row.  It does not go
through ``bench_batch_decode.py`` because importing torch costs 2-4 s a process on this 2-core
machine, and a trial makes about 300-500 runs.

GPU (``--device cuda``): 16 commits whose torch plugin runs 50 bf16 matmuls of 2048^2 a call,
51 from the hidden commit on (2 % more of the same kernel); each run is a fresh process that
imports torch and times 20 calls with CUDA events (the median call).  ``--torch`` runs the same
plugin on the CPU (for checking the path here); ``--harness`` instead runs
``bench_batch_decode.py`` with an SDPA plugin (a full sweep per run: slow).

    python benchmarks/bisect_trials.py --trials 40                 # the issue's target
    python benchmarks/bisect_trials.py --trials 10 --step-pct 0.5  # must end in "cannot tell"
    python benchmarks/bisect_trials.py --device cuda --trials 1 --verbose   # a GPU: 16, 2 %

A trial is right when the bisect names the hidden commit, "cannot tell" when it names none, and
wrong otherwise.  Prints the counts, the mean number of revisions probed and runs made, and the
wall time.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fi_attn_bench.history.bisect import BisectSettings, Outcome, bisect  # noqa: E402
from fi_attn_bench.history.bisect_runs import CommandProber, RunCommand  # noqa: E402
from fi_attn_bench.history.bisect_sources import Worktrees, commit_line  # noqa: E402
from fi_attn_bench.history.bisect_stats import TESTS  # noqa: E402
from fi_attn_bench.results.run_store import RunStore  # noqa: E402

HARNESS = Path(__file__).resolve().parent.parent
CPU_BASE_REPEATS = 250  # kernel repeats per call at the good commits
CPU_CASE = "api=BatchDecodeWithPagedKVCacheWrapper,batch_size=1,seq_len_kv=4"
CUDA_CASE = "batch_size=16,seq_len_kv=2048,num_kv_heads=4"  # one case of the default preset
HARNESS_CPU_CASE = "batch_size=4,seq_len_kv=200"  # one case of the cpu preset (--harness on a CPU)
CUDA_BASE_REPEATS = 50  # SDPA launches per call at the good commits (2 %: 51)

CPU_PLUGIN = '''"""A CPU plugin: one decode query against SEQ keys of DIM, in pure Python."""
import math
import random

REPEATS = {repeats}  # the hidden commit raises this: more work of the same kind
SEQ, DIM = 4, 8


def make():
    rng = random.Random(0)
    query = [rng.random() for _ in range(DIM)]
    keys = [[rng.random() for _ in range(DIM)] for _ in range(SEQ)]
    values = [[rng.random() for _ in range(DIM)] for _ in range(SEQ)]
    scale = 1 / math.sqrt(DIM)

    def kernel():
        scores = [scale * sum(q * k for q, k in zip(query, key)) for key in keys]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        return [sum(w * v[i] for w, v in zip(weights, values)) / total for i in range(DIM)]

    def run():
        for _ in range(REPEATS):
            out = kernel()
        return out

    return run
'''

# How every runner ends: its one row written as a CSV (no braces: the runners are .format()ed).
WRITE_ROW = """with open(sys.argv[1], "w", newline="") as stream:
    writer = csv.DictWriter(stream, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(row)
"""

CPU_RUNNER = (
    '''"""One run: time the plugin's calls and write one CSV row.  Each call is timed by this thread's
CPU time (the clock the harness's CPU stopwatch reads: on a shared CPU, wall time includes
whatever the OS ran instead), and the run's time is its fastest call."""
import csv
import datetime
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plugin

CALLS, WARMUP = {calls}, 1
run = plugin.make()
for _ in range(WARMUP):
    run()
samples = []
for _ in range(CALLS):
    start = time.thread_time()
    run()
    samples.append((time.thread_time() - start) * 1e3)
row = {{
    "schema_version": "1", "api": "BatchDecodeWithPagedKVCacheWrapper", "batch_size": "1",
    "seq_len_q": "1", "seq_len_kv": str(plugin.SEQ), "num_qo_heads": "1", "num_kv_heads": "1",
    "head_dim": str(plugin.DIM), "impl": "plugin", "status": "ok",
    "time_ms": repr(min(samples)), "bandwidth_GB_s": "0", "tflops": "0",
    "error_type": "", "error": "", "timer": "wall", "device": "cpu", "samples": str(CALLS),
    "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "run_id": uuid.uuid4().hex,
}}
'''
    + WRITE_ROW
)

TORCH_BASE_REPEATS = 50  # matmuls per call at the good commits (2 %: 51)
TORCH_CASE = "api=BatchDecodeWithPagedKVCacheWrapper,batch_size=1,seq_len_kv=2048"

TORCH_PLUGIN = '''"""A torch plugin: REPEATS matmuls of SIZE x SIZE per call (the hidden commit adds some:
more kernel work of the same kind, so the time ratio is the repeats' ratio)."""
import torch

REPEATS = {repeats}
SIZE = {size}


def make(device):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(SIZE, SIZE, generator=generator).to(device, dtype)
    b = torch.randn(SIZE, SIZE, generator=generator).to(device, dtype) / SIZE**0.5
    out = torch.empty_like(a)

    def run():
        for _ in range(REPEATS):
            torch.matmul(a, b, out=out)
        return out

    return run
'''

TORCH_RUNNER = (
    '''"""One run: time the plugin's calls on DEVICE (CUDA events on a GPU, thread CPU time on a
CPU) and write one CSV row; the run's time is the median call."""
import csv
import datetime
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plugin
import torch

DEVICE, CALLS, WARMUP = {device!r}, {calls}, 3
run = plugin.make(DEVICE)
for _ in range(WARMUP):
    run()
samples = []
for _ in range(CALLS):
    if DEVICE == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    else:
        began = time.thread_time()
        run()
        samples.append((time.thread_time() - began) * 1e3)
row = {{
    "schema_version": "1", "api": "BatchDecodeWithPagedKVCacheWrapper", "batch_size": "1",
    "seq_len_q": "1", "seq_len_kv": "2048", "num_qo_heads": "1", "num_kv_heads": "1",
    "head_dim": str(plugin.SIZE), "impl": "plugin", "status": "ok",
    "time_ms": repr(statistics.median(samples)), "bandwidth_GB_s": "0", "tflops": "0",
    "error_type": "", "error": "", "timer": "events" if DEVICE == "cuda" else "wall",
    "device": DEVICE, "samples": str(CALLS),
    "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "run_id": uuid.uuid4().hex,
}}
'''
    + WRITE_ROW
)

CUDA_PLUGIN = '''"""A CUDA plugin for bench_batch_decode.py: dense SDPA over the gathered pages, REPEATS
launches per call (the hidden commit adds one: 2 % more kernel work)."""
import math

import torch
import torch.nn.functional as F

REPEATS = {repeats}


def make(context):
    inputs = context.inputs
    q, k_cache, v_cache, table = inputs.q, inputs.k_cache, inputs.v_cache, inputs.table
    batch, qo_heads, dim = q.shape
    kv_heads, page = k_cache.shape[2], k_cache.shape[1]
    lengths = table.kv_lens.tolist()
    indptr, pages = table.kv_indptr.tolist(), table.kv_indices.long()
    index = torch.stack([
        (pages[indptr[r]:indptr[r + 1], None] * page
         + torch.arange(page, device=q.device)).reshape(-1)[:lengths[r]]
        for r in range(batch)
    ])  # every request of the case has the same length
    output = torch.empty_like(q)

    def run():
        keys = k_cache.reshape(-1, kv_heads, dim)[index].transpose(1, 2)
        values = v_cache.reshape(-1, kv_heads, dim)[index].transpose(1, 2)
        query = q.reshape(batch, kv_heads, qo_heads // kv_heads, dim)
        for _ in range(REPEATS):
            attended = F.scaled_dot_product_attention(query, keys, values, scale=1 / math.sqrt(dim))
        output.copy_(attended.reshape(batch, qo_heads, dim))
        return output

    from fi_attn_bench.backends.impls import PluginRun

    return PluginRun(run=run, output=output)
'''


@dataclass(frozen=True)
class TrialRepository:
    path: Path
    hidden: str  # full hash of the commit that slows the plugin
    good: str
    bad: str


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repository(
    path: Path, commits: int, hidden_at: int, plugin: str, runner: str | None, repeats: tuple
) -> TrialRepository:
    """``commits`` commits; commit ``hidden_at`` (1..commits-1) raises the plugin's repeats
    from repeats[0] to repeats[1]; the others touch a notes file only."""
    path.mkdir(parents=True)
    _git(path, "init", "--quiet", "--initial-branch=main")
    _git(path, "config", "user.email", "trials@example.com")
    _git(path, "config", "user.name", "trials")
    hashes = []
    for number in range(commits):
        slow = number >= hidden_at
        (path / "plugin.py").write_text(plugin.format(repeats=repeats[1] if slow else repeats[0]))
        if runner is not None:
            (path / "run_case.py").write_text(runner)
        with open(path / "NOTES.txt", "a") as notes:
            notes.write(f"change {number}\n")
        _git(path, "add", "-A")
        _git(path, "commit", "--quiet", "-m", f"change {number}")
        hashes.append(_git(path, "rev-parse", "HEAD"))
    return TrialRepository(path, hashes[hidden_at], hashes[0], hashes[-1])


def calibrated_cpu_repeats(step_pct: float, calls: int, rounds: int = 15) -> tuple[int, float]:
    """The slow commit's kernel repeats whose measured time ratio is 1 + step_pct / 100 (the
    calls carry a fixed cost, so the repeats alone are not the ratio), and that ratio."""
    namespace: dict = {}
    exec(CPU_PLUGIN.format(repeats=CPU_BASE_REPEATS), namespace)  # noqa: S102 - our own text

    def median_ms(repeats: int) -> float:
        namespace["REPEATS"] = repeats
        run = namespace["make"]()
        samples = []
        for _ in range(calls):
            start = time.thread_time()
            run()
            samples.append(time.thread_time() - start)
        return min(samples) * 1e3

    slow = round(CPU_BASE_REPEATS * (1 + step_pct / 100))
    ratios = []
    for _ in range(rounds):  # interleaved, so load changes hit both alike
        base = median_ms(CPU_BASE_REPEATS)
        ratios.append(median_ms(slow) / base)
    measured = sorted(ratios)[len(ratios) // 2]
    corrected = round(
        CPU_BASE_REPEATS + (slow - CPU_BASE_REPEATS) * step_pct / 100 / (measured - 1)
    )
    return corrected, measured


def print_step(step) -> None:
    print(step.describe(), flush=True)


def trial(seed: int, args, repeats: tuple, workspace: Path) -> tuple[str, int, int, str]:
    rng = random.Random(seed)
    commits = args.commits
    hidden_at = rng.randint(1, commits - 1)
    cuda = args.harness
    if args.torch:
        plugin = TORCH_PLUGIN.replace("{size}", str(args.size))
        runner = TORCH_RUNNER.format(device=args.device, calls=args.calls)
    else:
        plugin = CUDA_PLUGIN if cuda else CPU_PLUGIN
        runner = None if cuda else CPU_RUNNER.format(calls=args.calls)
    repo = make_repository(workspace / f"trial{seed}", commits, hidden_at, plugin, runner, repeats)
    if args.torch:
        argv = ("{python}", "-I", "{rev_dir}/run_case.py", "{output}")  # site-packages: torch
        case = TORCH_CASE
    elif cuda:
        case = CUDA_CASE if args.device == "cuda" else HARNESS_CPU_CASE
        argv = (
            "{python}", str(HARNESS / "bench_batch_decode.py"), "--device", args.device,
            "--impl", "{rev_dir}/plugin.py:make", "--filter", case, "--output", "{output}",
            "--min-time-ms", "100", "--no-energy",  # a cheap run: the bisect repeats it
        )  # fmt: skip
    else:
        argv = (
            "{python}",
            "-I",
            "-S",
            "{rev_dir}/run_case.py",
            "{output}",
        )  # stdlib only: fast start
        case = CPU_CASE
    revisions = commit_line(repo.path, repo.good, repo.bad)
    runs = []
    with (
        Worktrees(repo.path) as source,
        RunStore.open(repo.path / "store.sqlite", create=True) as store,
    ):
        from fi_attn_bench.history.analysis import parse_case_filter

        prober = CommandProber(
            source,
            RunCommand(argv=argv, timeout_s=600),
            parse_case_filter(case),
            case,
            store,
            "bisect",
            on_run=runs.append,
        )
        try:
            result = bisect(
                revisions,
                prober,
                BisectSettings(
                    max_repeats=args.max_repeats,
                    seed=seed,
                    test=args.test,
                    same_confidence=args.same_confidence,
                    trim=args.trim,
                    alpha=args.alpha,
                ),
                on_step=print_step if args.verbose else lambda step: None,
            )
        finally:
            prober.close()
    if result.outcome is not Outcome.FOUND:
        verdict = "cannot tell"
    else:
        verdict = "right" if result.first_bad.key == repo.hidden else "wrong"
    first = result.steps[0].against_good
    measured = f"{first.estimate.ratio:.4f}" if first is not None else "?"
    note = f"hidden {hidden_at}, good/bad ratio {measured}: {result.summary()}"
    return verdict, result.probes, len(runs), note


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1, help="first trial's seed")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--commits", type=int, help="default 64 (cpu), 16 (cuda)")
    parser.add_argument("--step-pct", type=float, help="default 3 (cpu), 2 (cuda)")
    parser.add_argument("--calls", type=int, help="timed calls per run (default 5; torch: 20)")
    parser.add_argument("--alpha", type=float, default=BisectSettings().alpha)
    parser.add_argument("--max-repeats", type=int, default=BisectSettings().max_repeats)
    parser.add_argument("--test", choices=TESTS, default=BisectSettings().test)
    parser.add_argument("--trim", type=float, default=BisectSettings().trim)
    parser.add_argument("--same-confidence", type=float, default=BisectSettings().same_confidence)
    parser.add_argument("--workspace", help="keep the repositories here (default: a temp dir)")
    parser.add_argument("--verbose", action="store_true", help="print every step's evidence")
    parser.add_argument(
        "--torch",
        action="store_true",
        help="the torch matmul plugin on --device (the default with --device cuda)",
    )
    parser.add_argument("--size", type=int, default=2048, help="the torch plugin's matrix side")
    parser.add_argument(
        "--harness",
        action="store_true",
        help="run bench_batch_decode.py with an SDPA plugin instead (slow: a full sweep a run)",
    )
    args = parser.parse_args(argv)
    args.torch = not args.harness and (args.torch or args.device == "cuda")
    if args.device == "cuda" and not cuda_available():
        print("error: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    gpu_like = args.torch or args.harness
    args.calls = args.calls or (20 if args.torch else 5)
    args.commits = args.commits or (16 if gpu_like else 64)
    step = args.step_pct if args.step_pct is not None else (2.0 if gpu_like else 3.0)
    if args.torch:
        repeats = (TORCH_BASE_REPEATS, round(TORCH_BASE_REPEATS * (1 + step / 100)))
        print(f"plugin: {repeats[0]} -> {repeats[1]} matmuls of {args.size}^2 per call")
    elif args.harness:
        repeats = (CUDA_BASE_REPEATS, round(CUDA_BASE_REPEATS * (1 + step / 100)))
        print(f"plugin: {repeats[0]} -> {repeats[1]} SDPA launches per call (kernel work ratio)")
    else:
        slow, measured = calibrated_cpu_repeats(step, args.calls)
        repeats = (CPU_BASE_REPEATS, slow)
        print(
            f"plugin: kernel repeats {CPU_BASE_REPEATS} -> {slow} (calibration measured "
            f"{measured:.4f} for {round(CPU_BASE_REPEATS * (1 + step / 100))})"
        )
    started = time.perf_counter()
    tally: dict[str, int] = {"right": 0, "cannot tell": 0, "wrong": 0}
    probes = runs = 0
    with tempfile.TemporaryDirectory(prefix="bisect-trials-") as scratch:
        workspace = Path(args.workspace) if args.workspace else Path(scratch)
        for seed in range(args.seed, args.seed + args.trials):
            verdict, trial_probes, trial_runs, note = trial(seed, args, repeats, workspace)
            tally[verdict] += 1
            probes += trial_probes
            runs += trial_runs
            print(
                f"trial {seed}: {verdict}, {trial_probes} probes, {trial_runs} runs; {note}",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    n = args.trials
    print(
        f"{args.device}{' torch' if args.torch else ''}, {args.commits} commits, {step:g} % step, {n} trials: right {tally['right']}, "
        f"cannot tell {tally['cannot tell']}, wrong {tally['wrong']}; mean probes "
        f"{probes / n:.2f}, mean runs {runs / n:.1f}; {elapsed:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
