"""Sharded sweeps end to end on the CPU: file names, row columns, logs, --resume per shard,
--cost-from, bench_all.py's pooled split, and torchrun --nproc-per-node 2."""

from __future__ import annotations

import csv
import dataclasses
import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import fake_bench_script
import pytest

from fi_attn_bench import suite as bench_all
from fi_attn_bench.backends import choice as backend_choice
from fi_attn_bench.command_line import main_for
from fi_attn_bench.history.reading import case_result, parsed_run
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.run_store import DEFAULT_STORE_NAME, RunStore
from fi_attn_bench.results.schema import STATUS_FAILED
from fi_attn_bench.sweep.sharding import case_wall_s
from fi_attn_bench.timing.options import TimingOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_GPU = backend_choice.Probe(
    cuda_available=lambda: False, import_flashinfer=lambda: SimpleNamespace(__version__="x")
)
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]
SPEC = fake_bench_script.SPEC
FIELDS = fake_bench_script.FIELDS
LAUNCH_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_JOB_ID",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def run(argv, spec=SPEC) -> int:
    return main_for(spec, [*FAST, "--preset", "default", *argv], probe=NO_GPU)


def keys(path, fields=FIELDS):
    return [tuple(row[f] for f in fields) for row in read_stored_rows(path).rows]


def all_keys(spec=SPEC, preset="default"):
    return sorted(tuple(str(case[f]) for f in spec.case_fields) for case in spec.presets[preset])


def test_shards_together_run_every_case_once_and_say_which_shard(tmp_path):
    for index in range(3):
        assert run(["--shard", f"{index}/3", "--output", str(tmp_path / "r.csv")]) == 0
    paths = sorted(tmp_path.glob("*.csv"))
    assert [p.name for p in paths] == [f"r.shard{i}of3.csv" for i in range(3)]
    assert sorted(k for p in paths for k in keys(p)) == all_keys()
    for index, path in enumerate(paths):
        rows = read_stored_rows(path).rows
        assert rows and {(r["shard"], r["num_shards"]) for r in rows} == {(str(index), "3")}


def test_unsharded_rows_leave_the_shard_columns_empty(tmp_path):
    assert run(["--output", str(tmp_path / "r.csv")]) == 0
    assert {(r["shard"], r["num_shards"]) for r in read_stored_rows(tmp_path / "r.csv").rows} == {
        ("", "")
    }


def test_torchrun_rank_1_logs_to_a_file_beside_its_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-9")
    assert run(["--output-dir", str(tmp_path)]) == 0
    csv_path = tmp_path / "FakeAttentionWrapper_torchrunrun9.shard1of2.csv"
    assert keys(csv_path)
    out, err = capsys.readouterr()
    assert "[1/" not in out and "Results saved" not in out
    log = (tmp_path / (csv_path.name + ".log")).read_text()
    assert "[1/" in log and "Results saved" in log and "shard 1/2 (torchrun" in log
    assert f"log in {csv_path}.log" in err


def test_rank_0_prints_and_writes_no_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    assert run(["--output-dir", str(tmp_path)]) == 0
    assert "[1/" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.log"))


def test_torchrun_without_a_run_id_needs_output(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert run(["--output-dir", str(tmp_path)]) == 2
    assert "--rdzv-id" in capsys.readouterr().err and not list(tmp_path.iterdir())
    assert run(["--output", str(tmp_path / "r.csv")]) == 0
    assert (tmp_path / "r.shard0of2.csv").exists()


def _fail_one_row(path):
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    rows[0] = {**rows[0], "status": STATUS_FAILED, "time_ms": ""}
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return tuple(rows[0][f] for f in FIELDS)


def test_resume_under_torchrun_takes_each_rank_to_its_own_csv(tmp_path, monkeypatch, capsys):
    base = tmp_path / "r.csv"
    for index in range(2):
        assert run(["--shard", f"{index}/2", "--output", str(base)]) == 0
    failed = _fail_one_row(tmp_path / "r.shard1of2.csv")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    capsys.readouterr()
    assert run(["--resume", str(tmp_path / "r.shard0of2.csv")]) == 0
    log = (tmp_path / "r.shard1of2.csv.log").read_text()
    assert "Resuming" in log and "[1/1] " + f"batch_size={failed[0]}" in log
    assert sorted(keys(tmp_path / "r.shard1of2.csv") + keys(tmp_path / "r.shard0of2.csv")) == (
        all_keys()
    )


def test_resume_with_another_shard_count_or_split_is_refused(tmp_path, capsys):
    assert run(["--shard", "0/2", "--output", str(tmp_path / "r.csv")]) == 0
    shard0 = tmp_path / "r.shard0of2.csv"
    before = shard0.read_bytes()
    assert run(["--resume", str(shard0), "--shard", "0/3"]) == 2
    assert "2-way split; this run is split 3 ways" in capsys.readouterr().err
    assert run(["--resume", str(shard0), "--preset", "full"]) == 2  # another selection
    assert "the interrupted sweep selected --preset default" in capsys.readouterr().err
    assert shard0.read_bytes() == before


def write_measured(path, cases) -> None:
    """A previous sweep's CSV of SPEC: (batch_size, time_ms) per case, seq_len 8."""
    fields = ["schema_version", "api", "batch_size", "seq_len", "status", "time_ms"]
    fields += ["bandwidth_GB_s", "tflops", "error_type", "error"]
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(fields)
        for batch, time_ms in cases:
            writer.writerow(["1", SPEC.api, batch, 8, "ok", time_ms, 1.0, 1.0, "", ""])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "no *.csv file in it"),
        (
            lambda p: p.write_text(f"api,batch_size,seq_len,status,time_ms\n{SPEC.api},1,8,ok,1\n"),
            "schema v1 is missing columns: bandwidth_GB_s, error, error_type, schema_version, tflops",
        ),
        (
            lambda p: p.write_text("a,b\n1,2\n"),
            "CSV does not match a known legacy FlashInfer schema",
        ),
        (
            lambda p: p.write_text(
                "schema_version,api,x,status,time_ms,bandwidth_GB_s,tflops,error_type,error\n"
            ),
            "CSV does not match a known FlashInfer benchmark schema",
        ),
    ],
    ids=["empty directory", "missing columns", "other file", "other script"],
)
def test_cost_from_without_valid_measurements_is_one_line_exit_two(tmp_path, capsys, make, message):
    previous = tmp_path / "prev"
    make(previous)
    argv = ["--shard", "0/2", "--output", str(tmp_path / "r.csv"), "--cost-from", str(previous)]
    assert run(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].endswith(message), errors
    assert not (tmp_path / "r.shard0of2.csv").exists()


def test_resume_with_another_split_is_refused(tmp_path, capsys):
    previous = tmp_path / "prev.csv"
    write_measured(previous, [(1, 1000.0)])
    argv = ["--shard", "1/2", "--output", str(tmp_path / "r.csv"), "--cost-from", str(previous)]
    assert run(argv) == 0  # shard 0 runs the 1 s case alone, shard 1 the 7 others
    shard1 = tmp_path / "r.shard1of2.csv"
    before = shard1.read_bytes()
    assert run(["--resume", str(shard1)]) == 2  # predicted costs: another split
    assert "not in shard 1/2 now" in capsys.readouterr().err
    assert shard1.read_bytes() == before


def test_resume_of_a_shard_that_wrote_no_csv_yet_runs_all_its_cases(tmp_path):
    assert run(["--shard", "0/2", "--output", str(tmp_path / "r.csv")]) == 0
    assert run(["--resume", str(tmp_path / "r.shard0of2.csv"), "--shard", "1/2"]) == 0
    assert sorted(keys(tmp_path / "r.shard0of2.csv") + keys(tmp_path / "r.shard1of2.csv")) == (
        all_keys()
    )


def _listed(argv, capsys, spec=SPEC):
    capsys.readouterr()
    assert main_for(spec, ["--list", "--preset", "default", *argv], probe=NO_GPU) == 0
    out = capsys.readouterr().out
    return [line.split("  ~")[0] for line in out.splitlines() if "  ~" in line], out


def test_list_shows_the_shards_cases_and_their_cost(capsys):
    listed = [_listed(["--shard", f"{i}/2"], capsys) for i in range(2)]
    cases = [case for lines, _ in listed for case in lines]
    assert len(cases) == len(set(cases)) == len(SPEC.presets["default"])
    assert "shard 0/2 (--shard, split by cost, predicted costs): 4 of 8 cases" in listed[0][1]


def test_cost_from_a_previous_csv_moves_an_expensive_case_alone(tmp_path, capsys):
    previous = tmp_path / "prev.csv"
    write_measured(previous, [(1, 1000.0), (2, 0.01)])  # a 1 s call: 3 s warm-up, 2 s budget
    argv = ["--shard", "0/2", "--cost-from", str(previous)]
    lines, out = _listed(argv, capsys)
    others, _ = _listed(["--shard", "1/2", "--cost-from", str(previous)], capsys)
    heavy = "batch_size=1,seq_len=8"
    assert heavy in lines and len(lines) < len(others)
    assert f"2 of 8 costs from {previous}" in out
    assert f"{heavy}  ~{case_wall_s(1000.0, TimingOptions()):.2f} s (measured)" in out


def write_store_run(store_path, run_id, stamp, cases) -> None:
    """One run of SPEC's (batch_size, time_ms) cases, seq_len 8, in a history store."""
    header = ["schema_version", "api", "batch_size", "seq_len", "status", "time_ms"]
    header += ["timestamp_utc", "run_id"]
    rows = [
        dict(zip(header, ["1", SPEC.api, str(b), "8", "ok", str(t), stamp, run_id], strict=True))
        for b, t in cases
    ]
    results = tuple(case_result(row, ["batch_size", "seq_len"], header) for row in rows)
    with RunStore.open(store_path, create=True) as store:
        store.add_run(parsed_run(run_id, store_path, header, rows, results), "main")


def test_cost_from_a_history_store_takes_each_cases_newest_run(tmp_path, capsys):
    store = tmp_path / "history.sqlite"
    write_store_run(store, "new", "2026-02-01T00:00:00Z", [(1, 1000.0), (2, 0.01)])
    write_store_run(store, "old", "2026-01-01T00:00:00Z", [(2, 1000.0), (3, 0.01)])
    lines, out = _listed(["--shard", "0/2", "--cost-from", str(store)], capsys)
    others, other_out = _listed(["--shard", "1/2", "--cost-from", str(store)], capsys)
    assert "batch_size=1,seq_len=8" in lines and len(lines) < len(others)
    assert f"3 of 8 costs from {store}" in out
    assert (
        f"batch_size=2,seq_len=8  ~{case_wall_s(0.01, TimingOptions()):.2f} s (measured)"
        in other_out
    )


def test_the_history_store_beside_the_results_is_used_by_default(tmp_path, capsys):
    write_store_run(
        tmp_path / DEFAULT_STORE_NAME, "r", "2026-02-01T00:00:00Z", [(1, 1000.0), (2, 0.01)]
    )
    _, out = _listed(["--shard", "0/2", "--output-dir", str(tmp_path)], capsys)
    assert f"2 of 8 costs from {tmp_path / DEFAULT_STORE_NAME}" in out
    _, elsewhere = _listed(["--shard", "0/2", "--output-dir", str(tmp_path / "new")], capsys)
    assert "predicted costs" in elsewhere
    _, by_count = _listed(
        ["--shard", "0/2", "--output-dir", str(tmp_path), "--shard-by", "count"], capsys
    )
    assert "costs from" not in by_count


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"SQLite format 3\x00" + b"\xff" * 200, "not a usable history store"),
        (None, "is an SQLite file but not a history store"),
    ],
    ids=["corrupt", "another SQLite file"],
)
def test_cost_from_an_unusable_store_is_one_line_exit_two(tmp_path, capsys, content, message):
    store = tmp_path / "history.sqlite"
    if content is None:
        sqlite3.connect(store).execute("CREATE TABLE t (x)").connection.commit()
    else:
        store.write_bytes(content)
    argv = ["--shard", "0/2", "--output", str(tmp_path / "r.csv"), "--cost-from", str(store)]
    assert run(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"error: --cost-from: {store}" in errors[0], errors
    assert message in errors[0]
    assert not (tmp_path / "r.shard0of2.csv").exists()


FIRST = SPEC
SECOND = dataclasses.replace(
    SPEC,
    api="OtherFakeWrapper",
    script="tests/other_fake.py",
    case_fields=("batch_size", "seq_len", "heads"),
    presets={"default": tuple({"batch_size": b, "seq_len": 8, "heads": 2} for b in (1, 2, 3))},
)


def test_bench_all_pools_the_scripts_cases_over_the_shards(tmp_path, capsys):
    for index in range(3):
        argv = ["--shard", f"{index}/3", "--output-dir", str(tmp_path), *FAST]
        code = bench_all.main([*argv, "--preset", "default"], probe=NO_GPU, specs=(FIRST, SECOND))
        assert code == 0
    out = capsys.readouterr().out
    assert "of 11 cases" in out  # one split over both scripts (8 + 3 cases)
    first = [k for p in tmp_path.glob("FakeAttentionWrapper_*.shard*of3.csv") for k in keys(p)]
    second_fields = SECOND.case_fields
    second = [
        k for p in tmp_path.glob("OtherFakeWrapper_*.shard*of3.csv") for k in keys(p, second_fields)
    ]
    assert sorted(first) == all_keys(FIRST) and sorted(second) == all_keys(SECOND)


def test_torchrun_two_processes_on_the_cpu_split_the_sweep(tmp_path):
    """python -m torch.distributed.run --nproc-per-node 2 over a real script, against one
    process: the same case set, each case once, each CSV with its shard."""
    common = ["bench_batch_decode.py", "--device", "cpu", "--preset", "cpu", *FAST]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env["PYTHONPATH"] = ROOT
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    sharded = subprocess.run(
        [*torchrun, *common, "--output-dir", str(tmp_path / "A")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sharded.returncode == 0, sharded.stderr[-2000:]
    single = subprocess.run(
        [sys.executable, *common, "--output", str(tmp_path / "B" / "one.csv")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-2000:]
    fields = ("batch_size", "seq_len_kv", "num_kv_heads", "head_dim")
    paths = sorted((tmp_path / "A").glob("*.csv"))
    assert [p.name.split(".", 1)[1] for p in paths] == ["shard0of2.csv", "shard1of2.csv"]
    assert len({p.name.split(".")[0] for p in paths}) == 1  # one run tag for both ranks
    merged = [k for p in paths for k in keys(p, fields)]
    assert len(merged) == len(set(merged))
    assert sorted(merged) == sorted(keys(tmp_path / "B" / "one.csv", fields))
    assert all(keys(p, fields) for p in paths)
    assert (tmp_path / "A" / (paths[1].name + ".log")).exists()
    assert "[1/" in sharded.stdout and sharded.stdout.count("Results saved") == 1


def _bench(*argv):
    return bench_all.main(list(argv), probe=NO_GPU, specs=(FIRST, SECOND))


def test_bench_all_resumes_a_shard_from_its_own_record(tmp_path, capsys):
    for index in range(2):
        argv = ["--shard", f"{index}/2", "--output-dir", str(tmp_path), *FAST]
        assert _bench(*argv, "--preset", "default") == 0
    records = sorted(p.name for p in tmp_path.glob("bench_all*.json"))
    assert records == ["bench_all.shard0of2.json", "bench_all.shard1of2.json"]
    first_shard1 = next(tmp_path.glob("FakeAttentionWrapper_*.shard1of2.csv"))
    failed = _fail_one_row(first_shard1)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.shard0of2.csv")}
    capsys.readouterr()
    assert _bench("--resume", str(tmp_path), "--shard", "1/2") == 0
    out = capsys.readouterr().out
    assert f"[1/1] batch_size={failed[0]},seq_len={failed[1]}" in out
    assert out.count("Resuming") == 2
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.shard0of2.csv")} == before
    first = [k for p in tmp_path.glob("FakeAttentionWrapper_*.csv") for k in keys(p)]
    assert sorted(first) == all_keys(FIRST)
    assert all(r["status"] == "ok" for r in read_stored_rows(first_shard1).rows)


def test_bench_all_resume_under_torchrun_reads_the_ranks_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    assert _bench("--output-dir", str(tmp_path), *FAST, "--preset", "default") == 0
    assert [p.name for p in tmp_path.glob("*.json")] == ["bench_all.shard1of2.json"]
    shard1 = tmp_path / "FakeAttentionWrapper_torchrunr.shard1of2.csv"
    _fail_one_row(shard1)
    assert _bench("--resume", str(tmp_path)) == 0
    assert "Resuming" in (tmp_path / (shard1.name + ".log")).read_text()
    assert all(r["status"] == "ok" for r in read_stored_rows(shard1).rows)
    monkeypatch.setenv("RANK", "0")  # rank 0 never ran here: no record of its shard
    assert _bench("--resume", str(tmp_path)) == 2
    assert "no bench_all.shard0of2.json there" in capsys.readouterr().err


def test_bench_all_second_run_of_a_finished_shard_keeps_the_first(tmp_path, capsys):
    argv = ["--shard", "0/2", "--output-dir", str(tmp_path), *FAST, "--preset", "default"]
    assert _bench(*argv) == 0
    csvs = {p.name: p.read_bytes() for p in tmp_path.glob("*.csv")}
    capsys.readouterr()
    assert _bench(*argv) == 0  # the first run finished: nothing to resume, its record moves aside
    (moved,) = tmp_path.glob("bench_all.shard0of2.json.bak-*")
    assert f"aside to {moved}" in capsys.readouterr().out
    after = {p.name: p.read_bytes() for p in tmp_path.glob("*.csv")}
    assert {name: after[name] for name in csvs} == csvs and len(after) == 2 * len(csvs)
    assert _bench(*argv[2:], "--shard", "1/2") == 0  # another shard: its own record


def test_bench_all_resume_takes_a_directory_only(tmp_path, capsys):
    assert _bench("--resume", str(tmp_path / "x.csv")) == 2
    assert "no bench_all.json there" in capsys.readouterr().err


def test_bench_all_resume_of_several_shards_records_needs_the_shard(tmp_path, capsys):
    for index in range(2):
        argv = ["--shard", f"{index}/2", "--output-dir", str(tmp_path), *FAST]
        assert _bench(*argv, "--preset", "default") == 0
    capsys.readouterr()
    assert _bench("--resume", str(tmp_path)) == 2
    assert "records of shards 0/2, 1/2" in capsys.readouterr().err
    assert _bench("--resume", str(tmp_path), "--shard", "0/3") == 2
    assert "no bench_all.shard0of3.json there" in capsys.readouterr().err
    assert _bench("--resume", str(tmp_path), "--preset", "full") == 2
    assert "no other option but --verbose and --shard" in capsys.readouterr().err


def test_bench_all_resume_of_one_shard_record_takes_that_shard(tmp_path, capsys):
    argv = ["--shard", "1/2", "--output-dir", str(tmp_path), *FAST, "--preset", "default"]
    assert _bench(*argv) == 0
    capsys.readouterr()
    assert _bench("--resume", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("Resuming") == 2 and "shard 1/2" in out


def test_shard_default_names_never_collide_and_keep_the_tag(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r")
    taken = tmp_path / "FakeAttentionWrapper_torchrunr.shard0of2.csv"
    taken.write_text("someone's file\n")
    assert run(["--output-dir", str(tmp_path)]) == 0
    assert taken.read_text() == "someone's file\n"
    assert keys(tmp_path / "FakeAttentionWrapper_torchrunr-2.shard0of2.csv")


def test_an_existing_shard_csv_is_never_overwritten(tmp_path, capsys):
    mine = tmp_path / "r.shard1of2.csv"
    mine.write_text("not ours\n")
    assert run(["--shard", "1/2", "--output", str(tmp_path / "r.csv")]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert mine.read_text() == "not ours\n"
    assert run(["--shard", "1/2", "--output", str(tmp_path / "r.csv"), "--force"]) == 0
    assert keys(mine) and len(list(tmp_path.glob("r.shard1of2.csv.bak-*"))) == 1


def test_samples_of_a_shard_go_to_its_own_file(tmp_path):
    samples = tmp_path / "samples"
    for index in range(2):
        argv = ["--shard", f"{index}/2", "--output", str(tmp_path / "r.csv")]
        assert run([*argv, "--samples-dir", str(samples)]) == 0
    assert sorted(p.name for p in samples.iterdir()) == [
        "r.shard0of2.samples.jsonl.gz",
        "r.shard1of2.samples.jsonl.gz",
    ]


def test_torchrun_rank_without_its_gpu_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    gpu = backend_choice.Probe(
        cuda_available=lambda: True, import_flashinfer=lambda: SimpleNamespace(__version__="x")
    )
    argv = ["--output", str(tmp_path / "r.csv")]
    assert main_for(SPEC, argv, probe=gpu) == 2  # this CPU machine has 0 GPUs
    assert "LOCAL_RANK 3 but 0 GPUs visible" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_shard_with_no_case_writes_nothing_and_says_so(tmp_path, capsys):
    argv = [*FAST, "--preset", "smoke", "--shard", "2/3", "--output", str(tmp_path / "r.csv")]
    assert main_for(SPEC, argv, probe=NO_GPU) == 0
    assert "0 of 2 cases" in capsys.readouterr().err and not list(tmp_path.iterdir())
