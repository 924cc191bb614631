"""Fresh values before every timed call, sampled checks on their own values, the static
screen of plugin source and --judge: each check against the cheapest attack on it,
and the honest implementations unflagged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import exploits
import pytest
import torch
from test_bench_common import read_rows, run_main
from test_integrity import _probe, _subject

import bench_batch_decode
import bench_batch_prefill_ragged
from fi_attn_bench.backends.screen import screen_file
from fi_attn_bench.cases.inputs import KvRows
from fi_attn_bench.results.schema import (
    INPUTS_WRITTEN,
    INTEGRITY_PASS,
    INTEGRITY_PASS_WEAK,
    SOURCE_SCREEN,
    TIMED_OUTPUT,
)
from fi_attn_bench.timing import fresh
from fi_attn_bench.timing.fresh import FreshCalls, Refresher, SampleRate
from fi_attn_bench.timing.integrity import IntegrityError, integrity_column
from fi_attn_bench.timing.timers import WallTimer

ROOT = Path(__file__).resolve().parent.parent
EXPLOITS = ROOT / "tests" / "exploits.py"
REACHING = ROOT / "tests" / "exploits_reaching"
HONEST_PLUGIN = "examples/sdpa_decode_plugin.py:make"


def _sweep(tmp_path, *impls: str, extra=(), spec=bench_batch_decode.SPEC) -> list[dict]:
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--output", str(out)]
    for impl in impls:
        argv += ["--impl", impl]
    run_main([*argv, *extra], spec=spec)
    return read_rows(out)


# ---------------------------------------------------------------- the first exploit


def test_the_version_cache_runs_its_kernel_on_every_timed_call():
    """A cache keyed on data_ptr() and _version skipped every other call while nothing
    changed (1.45-3.8x faster, head to head "faster").  Each timed call
    now sees values no earlier call saw, so none is answered from the cache."""
    probe = _probe(_subject(exploits.version_cache_every_other), "wall")
    session = WallTimer().open(probe.timed_fn(), 1.0)
    exploits.STALE.clear()
    session.batch(40)
    assert exploits.STALE["version_cache_every_other"] == 0
    assert probe.fresh.failure is None and probe.fresh.calls == 40


@pytest.mark.parametrize("name", exploits.CPU_TIMED_HONESTLY)
def test_the_caches_that_fresh_values_defeat_work_on_every_timed_call(name):
    probe = _probe(_subject(getattr(exploits, name)), "wall")
    session = WallTimer().open(probe.timed_fn(), 1.0)
    exploits.STALE.clear()
    session.batch(30)
    assert exploits.STALE[name] == 0


def test_the_version_cache_is_not_faster_head_to_head(tmp_path):
    """The sweep's rows: both pass, and the cheat's paired verdict is not read from a cache
    (its kernel ran on each timed call; the verdict itself is a timing left unasserted)."""
    exploits.STALE.clear()
    rows = _sweep(
        tmp_path,
        HONEST_PLUGIN,
        f"{EXPLOITS}:version_cache_every_other",
        extra=["--filter", "batch_size=4"],
    )
    assert {(row["status"], row["integrity"]) for row in rows} == {("ok", INTEGRITY_PASS)}


# ---------------------------------------------------------------- the refresh


def _decode_inputs():
    subject = _subject(exploits.pointer_cache)
    return subject.inputs


def test_a_refresh_rewrites_all_of_q_and_a_window_of_every_requests_pages():
    inputs = _decode_inputs()
    refresher = Refresher.of(inputs, [inputs.q, inputs.k_cache, inputs.v_cache], inputs.q.device)
    q, k = inputs.q.clone(), inputs.k_cache.clone()
    refresher()
    assert (inputs.q != q).float().mean() > 0.99  # all of q drawn anew (fp16 ties aside)
    changed = (inputs.k_cache != k).flatten(1).any(1)
    table = inputs.table
    indptr = table.kv_indptr.tolist()
    for request in range(len(indptr) - 1):
        pages = table.kv_indices[indptr[request] : indptr[request + 1]].long()
        assert changed[pages].any(), f"request {request}'s pages were not touched"
    assert changed.sum() < k.shape[0]  # a window, not the whole cache
    used = set(table.kv_indices.tolist())
    assert set(changed.nonzero().flatten().tolist()) <= used  # no spare page, no neighbour


def test_each_refresh_draws_new_rows_and_values_from_the_os_entropy():
    inputs = _decode_inputs()
    tensors = [inputs.q, inputs.k_cache, inputs.v_cache]
    first = Refresher.of(inputs, tensors, inputs.q.device)
    second = Refresher.of(inputs, tensors, inputs.q.device)
    first()
    drawn = inputs.q.clone()
    second()
    assert not torch.equal(drawn, inputs.q)  # two refreshers seeded apart
    windows = {tuple(first.rows[0][0].tolist()) for _ in range(5) if first() is None}
    assert len(windows) > 1


def test_ragged_inputs_get_a_window_of_every_requests_tokens():
    case = next(iter(bench_batch_prefill_ragged.SPEC.presets["cpu"]))
    settings = _subject(exploits.pointer_cache)  # the decode settings' device and dtype
    del settings
    from fi_attn_bench.cases.spec import Settings

    made = bench_batch_prefill_ragged.make_inputs(
        case, Settings(torch.device("cpu"), torch.float16, 16, "torch", seed=1)
    )
    rows = made.kv_rows()
    assert isinstance(rows, KvRows) and rows.tensors == (made.k, made.v)
    refresher = Refresher.of(made, [made.q, made.k, made.v], torch.device("cpu"))
    k = made.k.clone()
    refresher()
    changed = (made.k != k).flatten(1).any(1)
    indptr = made.kv_indptr.tolist()
    for request in range(len(indptr) - 1):
        assert changed[indptr[request] : indptr[request + 1]].any()


def test_a_refresh_rewrites_scattered_elements_of_every_token_of_every_request():
    """A K/V cache refreshed by a fingerprint of one element per row saw every change while refreshes
    rewrote whole rows.  Now every token's every head changes at positions drawn per call, so
    that fingerprint misses most of them, and the window stays a window."""
    inputs = _decode_inputs()
    refresher = Refresher.of(inputs, [inputs.q, inputs.k_cache, inputs.v_cache], inputs.q.device)
    table = inputs.table
    used = table.kv_indices.long()
    for cache in (inputs.k_cache, inputs.v_cache):
        before = cache.clone()
        refresher()
        window = refresher.rows[0][0]
        assert 0 < window.numel() < used.numel()  # the whole-row window: a share of the pages
        changed = cache != before  # [pages, page_size, heads, dim]
        outside = used[~torch.isin(used, window)]
        # every token's every head, windowed or not (a new fp16 value equal to the old one by
        # chance leaves about one vector in 10^4 as it was)
        assert changed[used].any(-1).float().mean().item() > 0.99
        share = changed[outside].float().mean().item()
        assert 0 < share <= fresh.SCATTERED_PER_VECTOR / cache.shape[-1]  # scattered: a few
        first = changed[outside][..., 0].float().mean().item()
        assert first < 0.25  # what x08 read: its fingerprint misses most changed vectors
        spare = torch.ones(cache.shape[0], dtype=torch.bool)
        spare[used] = False
        assert not changed[spare].any()  # no spare page


def test_scattered_positions_are_drawn_anew_each_call():
    inputs = _decode_inputs()
    refresher = Refresher.of(inputs, [inputs.q, inputs.k_cache, inputs.v_cache], inputs.q.device)
    positions = []
    for _ in range(2):
        before = inputs.k_cache.clone()
        refresher()
        window = refresher.rows[0][0]
        changed = inputs.k_cache != before
        changed[window] = False
        positions.append(changed)
    assert positions[0].any() and not torch.equal(positions[0], positions[1])


def test_scattered_rewrites_follow_a_non_contiguous_caches_strides():
    """A K/V that is a view (K and V halves of one tensor) gets its own elements written,
    its neighbour's never."""
    both = torch.zeros(6, 2, 4, 2, 32)  # [pages, K/V, page_size, heads, dim]
    k = both[:, 0]
    rows = KvRows((k,), torch.tensor([0, 2, 3]), torch.tensor([4, 1, 5]))
    refresher = Refresher.of(SimpleNamespace(kv_rows=lambda: rows), [k], torch.device("cpu"))
    refresher()
    assert not both[:, 1].any()  # V untouched
    assert (k[[1, 4, 5]] != 0).any(-1).all()  # every vector of every used page
    assert not k[[0, 2, 3]].any()  # unused pages untouched


def test_a_kept_kv_refreshed_by_fingerprint_fails_timed_output():
    """x08's family: a correct kernel on a K/V kept between calls, re-gathered where a
    one-element-per-head fingerprint changed; its stale rows give a wrong output."""
    probe = _probe(_subject(exploits.row_fingerprint_kv), "wall")
    probe.rate = SampleRate(1.0, 1.0)
    session = WallTimer().open(probe.timed_fn(), 1.0)
    exploits.STALE.clear()
    session.batch(6)
    assert exploits.STALE["row_fingerprint_kv"] > 0  # it skipped re-gathering stale tokens
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(session)
    assert caught.value.check == TIMED_OUTPUT


def test_inputs_without_kv_rows_are_rewritten_whole():
    tensors = [torch.zeros(8, 4), torch.zeros(3)]
    refresher = Refresher.of(object(), tensors, torch.device("cpu"))
    refresher()
    assert all(bool((t != 0).all()) for t in tensors)
    assert refresher.overwritten() is None
    tensors[1][0] = 0.0
    assert refresher.overwritten() is not None


# ---------------------------------------------------------------- the sampled checks


def test_the_sample_rate_checks_the_first_calls_and_a_floor_of_the_rest():
    rate = SampleRate(2.0, 1 / 8)
    assert rate.chance(1) == rate.chance(2) == 1.0
    assert rate.chance(4) == 0.5
    assert rate.chance(1000) == 1 / 8
    judge, default = fresh.SAMPLE_RATES["judge"], fresh.SAMPLE_RATES["default"]
    assert all(judge.chance(n) >= default.chance(n) for n in range(1, 200))


def test_a_call_is_drawn_after_it_returns_and_only_drawn_calls_are_checked():
    checked: list[int] = []
    calls = FreshCalls(
        run=lambda: None,
        refresh=lambda: None,
        check=lambda result: checked.append(calls.calls),
        rate=SampleRate(1.0, 0.0),
        draw=iter([0.9, 0.9, 0.2, 0.3, 0.1]).__next__,
    )
    for _ in range(5):
        calls.before_call()
        calls()
        calls.after_call()
    # call n is checked when draw < 1 / n: 0.9 < 1 (call 1), 0.2 < 1/3, 0.1 < 1/5
    assert checked == [1, 3, 5]


def test_a_wrong_sampled_call_fails_timed_output_with_the_counts():
    probe = _probe(_subject(exploits.stale_every_other), "wall")
    probe.rate = SampleRate(1.0, 1.0)
    session = WallTimer().open(probe.timed_fn(), 1.0)
    session.batch(6)
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(session)
    assert caught.value.check == TIMED_OUTPUT
    assert "timed calls, drawn at random, were checked" in str(caught.value)


def test_a_pause_detector_fails_on_a_checked_call_that_follows_an_unchecked_one():
    """works_after_a_pause works only after a pause, and a check is one; the draw is made
    after each call, so the call before a lone check got no warning."""
    probe = _probe(_subject(exploits.works_after_a_pause), "wall")
    timed = probe.timed_fn()
    timed.draw = iter([0.0] + [0.99] * 3 + [0.0] + [0.99] * 5).__next__  # calls 1 and 5
    session = WallTimer().open(timed, 1.0)
    session.batch(10)
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(session)
    assert caught.value.check in exploits.CPU_CAUGHT_BY_A_LONE_CHECK["works_after_a_pause"]


def test_a_call_that_writes_into_its_inputs_fails_inputs_written():
    probe = _probe(_subject(exploits.writes_into_inputs), "wall")
    probe.rate = SampleRate(1.0, 1.0)
    session = WallTimer().open(probe.timed_fn(), 1.0)
    session.batch(30)
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(session)
    assert caught.value.check == INPUTS_WRITTEN


def test_batch_timers_say_that_the_weaker_set_ran():
    for timer in ("wall", "profiler"):
        assert integrity_column(True, None, timer) == {"integrity": INTEGRITY_PASS}
    for timer in ("events", "cuda_graph"):
        assert integrity_column(True, None, timer) == {"integrity": INTEGRITY_PASS_WEAK}


# ---------------------------------------------------------------- the static screen

SCREENED = {
    "patches_clock.py": "module_patch",
    "patches_harness.py": "harness",
    "patches_cuda_event.py": "cuda_timing",
    "patches_profiler.py": "profiler",
    "reads_frames.py": "frames",
    "hunts_objects.py": "gc",
    "swaps_modules.py": "sys_modules",
    "calls_ctypes.py": "ctypes",
    "l2_persisting_window.py": "ctypes",
    "patches_builtins.py": "builtins",
    "runs_hidden_code.py": "dynamic_code",
    "walks_subclasses.py": "reflection",
    "swaps_code.py": "reflection",
    "builds_attribute_names.py": "dynamic_code",
    "writes_pipe_fd.py": "process",
    "pushes_function_mode.py": "reflection",
}


@pytest.mark.parametrize("name", sorted(SCREENED))
def test_the_screen_flags_each_plugin_that_reaches_into_the_harness(name):
    rules = {finding.rule for finding in screen_file(str(REACHING / name))}
    assert SCREENED[name] in rules


def test_the_screen_passes_the_examples_and_the_plugin_interface():
    assert screen_file(str(ROOT / "examples" / "sdpa_decode_plugin.py")) == ()


def test_the_screen_reads_the_source_without_running_it(tmp_path):
    plugin = tmp_path / "p.py"
    plugin.write_text("import ctypes\nraise SystemExit('ran')\n")
    (finding,) = screen_file(str(plugin))
    assert (finding.line, finding.rule) == (1, "ctypes")
    assert finding.describe() == f"{plugin}:1: ctypes: imports ctypes"


def test_by_default_a_finding_is_one_warning_line_and_the_row_runs(tmp_path):
    out = tmp_path / "r.csv"
    done = subprocess.run(
        [
            sys.executable,
            "bench_batch_decode.py",
            *("--preset", "cpu", "--device", "cpu", "--filter", "batch_size=1"),
            *("--filter", "seq_len_kv=37", "--output", str(out)),
            *("--impl", f"{EXPLOITS}:works_after_a_pause", "--no-integrity"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: --impl")]
    rules = sorted(w.split(": ")[-2] for w in warnings)  # one line per finding: FILE:LINE: rule
    assert rules == ["clock", "clock", "profiler"] and all("exploits.py:" in w for w in warnings)
    assert {row["status"] for row in read_rows(out)} == {"ok"}


def test_under_judge_a_finding_fails_the_row_without_running_the_plugin(tmp_path):
    ran = tmp_path / "ran"
    plugin = tmp_path / "gc_plugin.py"
    plugin.write_text(f"import gc\nopen({str(ran)!r}, 'w').close()\ndef make(context): pass\n")
    rows = _sweep(
        tmp_path, "torch", f"{plugin}:make", extra=["--judge", "--filter", "batch_size=1"]
    )
    flagged = [row for row in rows if row["impl"] == "gc_plugin:make"]
    assert flagged and {(r["status"], r["integrity"]) for r in flagged} == {
        ("failed", SOURCE_SCREEN)
    }
    assert "gc_plugin.py:1: gc: imports gc" in flagged[0]["error"]
    assert not ran.exists()
    assert {r["status"] for r in rows if r["impl"] == "torch"} == {"ok"}
    assert "--judge" in rows[0]["repro"]


# ---------------------------------------------------------------- the profiler


class RefreshedRun:
    """A timed function with a refresh before each call, logging what ran."""

    def __init__(self, trace: list[str]):
        self.trace = trace

    def before_call(self):
        self.trace.append("refresh")

    def __call__(self):
        self.trace.append("call")

    def after_call(self):
        self.trace.append("after")


KERNELS = {
    "refresh": [("normal_kernel", 7_000), ("index_copy_kernel", 3_000)],
    "flush": [("flush_kernel", 50_000)],
    "call": [("attn", 100_000)],
}


def _fake_profiler(cold: bool, marked_events):
    """A ProfilerTimer whose profiler turns each logged step into its scripted kernels."""
    from types import SimpleNamespace

    from fi_attn_bench.timing import options as topts
    from fi_attn_bench.timing import timers
    from fi_attn_bench.timing.trace import DeviceEvent

    trace: list[str] = []

    def profile(body, sync):
        trace.clear()
        body()
        events, t = [], 0
        for item in trace:
            for name, duration in KERNELS.get(item, []):
                events.append(DeviceEvent(name, t, duration))
                t += duration + 500
        return events

    options = topts.TimingOptions(timer="profiler", l2="cold" if cold else "warm")
    flusher = SimpleNamespace(flush=lambda: trace.append("flush"))
    timer = timers.ProfilerTimer(options, torch.device("cpu"), flusher, profile=profile)
    timer.sync = lambda: None
    return timer, trace


@pytest.fixture
def marked_events(monkeypatch):
    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            pass

        def elapsed_time(self, end):
            return 0.5

    monkeypatch.setattr(torch.cuda, "Event", Event)


@pytest.mark.usefixtures("marked_events")
@pytest.mark.parametrize("cold", [True, False])
def test_the_profiler_refreshes_before_each_call_and_counts_the_refresh_out(cold):
    timer, trace = _fake_profiler(cold, None)
    fn = RefreshedRun(trace)
    session = timer.open(fn, 0.1)
    assert session.calibration.flush_count == 2 + cold  # the refresh's 2 kernels, the flush's
    batches = session.record(lambda: [session.batch(c) for c in (3, 2)])
    steps = [s for s in trace if s != "after"]
    per_call = ["refresh", "flush", "call"] if cold else ["refresh", "call"]
    assert steps == per_call * 5  # refreshed, then flushed, then run; nothing in the loop after
    # each sample is run()'s kernel alone (the stream gap after the flush, or its duration)
    assert [b.per_call for b in batches] == [True, True]
    assert all(s == pytest.approx(0.1005 if cold else 0.1) for b in batches for s in b.samples_ms)


def test_under_the_profiler_the_last_timed_call_is_checked_after_the_loop():
    probe = _probe(_subject(exploits.stale_every_other), "profiler")
    timed = probe.timed_fn()
    assert timed.rate is None  # no check inside the recording
    for _ in range(4):  # calls 1 and 3 run the kernel, 2 and 4 copy the last output
        timed.before_call()
        timed()
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(None)
    assert caught.value.check == TIMED_OUTPUT and timed.checked == 1


def test_under_the_profiler_an_honest_last_call_passes_and_a_later_writer_is_noted():
    probe = _probe(_subject(exploits.stale_every_other), "profiler")
    timed = probe.timed_fn()
    for _ in range(3):
        timed.before_call()
        timed()
    other = Refresher.of(probe.subject.inputs, [probe.subject.inputs.q], torch.device("cpu"))
    probe.check_timed_output(None)  # call 3 ran the kernel
    other()  # another implementation's refresh of the shared q, after this one's last call
    probe.check_timed_output(None)
    assert any("not checked" in note for note in probe.notes)


def test_the_screen_finds_a_module_plugins_file_without_importing_its_packages(
    tmp_path, monkeypatch
):
    from fi_attn_bench.backends.screen import plugin_source

    package = tmp_path / "contest_pkg" / "team"
    package.mkdir(parents=True)
    (tmp_path / "contest_pkg" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "__init__.py").write_text("")
    (package / "kernel.py").write_text("import gc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugin_source("contest_pkg.team.kernel")
    assert found == str(package / "kernel.py")
    assert [f.rule for f in screen_file(found)] == ["gc"]
    assert plugin_source("contest_pkg.team.missing") is None


def test_the_screen_follows_the_plugins_own_helper_modules(tmp_path):
    from fi_attn_bench.backends.screen import screen_plugin_files

    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "timing.py").write_text("import torch\ntorch.cuda.synchronize = None\n")
    (tmp_path / "plugin.py").write_text("import math\nfrom helpers import timing\n")
    found = screen_plugin_files(str(tmp_path / "plugin.py"))
    assert [(Path(f.path).name, f.line, f.rule) for f in found] == [("timing.py", 2, "cuda_timing")]


def test_a_plugin_beside_the_harness_is_not_charged_with_the_harness_source(tmp_path, monkeypatch):
    from fi_attn_bench.backends import screen

    harness = tmp_path / "fi_attn_bench" / "backends"
    harness.mkdir(parents=True)
    (tmp_path / "fi_attn_bench" / "__init__.py").write_text("import importlib\n")
    (harness / "__init__.py").write_text("")
    (harness / "impls.py").write_text("import inspect\n")
    monkeypatch.setattr(screen, "HARNESS", str(tmp_path / "fi_attn_bench"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text("from fi_attn_bench.backends.impls import PluginRun\nimport fi_attn_bench\n")
    found = screen.screen_plugin_files(str(plugin))
    assert [f.rule for f in found] == ["harness"]  # `import fi_attn_bench` itself, nothing inside


@pytest.mark.usefixtures("marked_events")
def test_the_refresh_is_recorded_once_per_timed_function_before_the_session_opens():
    timer, trace = _fake_profiler(True, None)
    recordings = []
    profile = timer.profile
    timer.profile = lambda body, sync: recordings.append(body) or profile(body, sync)
    fn = RefreshedRun(trace)
    assert [e.name for e in timer.calibrate_call(fn)] == ["normal_kernel", "index_copy_kernel"]
    session = timer.open(fn, 0.1)
    assert session.calibration.flush_count == 3
    assert recordings.count(fn.before_call) == 1  # open() reused the one made before sustain


def test_judge_refuses_to_run_plugins_in_the_harness_process(tmp_path, capsys):
    """--judge turns every strict check on; running plugins in-process would turn one off."""
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--output", str(out)]
    argv += ["--impl", "examples/sdpa_decode_plugin.py:make", "--judge", "--no-isolation"]
    assert run_main(argv, spec=bench_batch_decode.SPEC) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "error: --judge runs --impl plugins in a worker process: drop --no-isolation"
    )
    assert not out.exists()
