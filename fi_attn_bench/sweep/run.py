"""The sweep: every selected case in turn, each row stored as soon as it is finished."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

import torch

from fi_attn_bench.backends.impls import backend_column
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_text
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.device.energy import EnergyAccess, open_energy_counter
from fi_attn_bench.device.power import open_power_monitor
from fi_attn_bench.device.telemetry import open_telemetry
from fi_attn_bench.program import code_directory
from fi_attn_bench.results.schema import (
    IMPL_COLUMN,
    STATUS_OK,
    ResultCsvWriter,
    ResultStreamWriter,
    csv_fieldnames,
    result_record,
)
from fi_attn_bench.sweep.case import (
    CaseResult,
    CaseRunner,
    case_work,
    freeze_startup_objects,
    release_memory,
    with_uniform_twin,
)
from fi_attn_bench.sweep.environment import (
    environment_columns,
    load_roofline,
    new_run_id,
    timestamp_utc,
)
from fi_attn_bench.sweep.isolation import case_runner_class
from fi_attn_bench.sweep.outputs import back_up, move_aside, writes_stdout
from fi_attn_bench.sweep.progress import Eta, Progress, clip_error, summary_line
from fi_attn_bench.sweep.run_options import RunOptions
from fi_attn_bench.sweep.sample_writer import append_samples, samples_line
from fi_attn_bench.sweep.sharding import CostPeaks, case_call_ms, reference_peaks, shard_columns
from fi_attn_bench.sweep.storage import (
    ResultStore,
    load_resume_rows,
    remove_stale_temporaries,
    resume_todo,
)
from fi_attn_bench.timing.paired import FASTER, SAME, SLOWER, PairedRatio
from fi_attn_bench.timing.timers import Timer, method_columns
from fi_attn_bench.wording import counted


@dataclass
class Sweep:
    spec: BenchmarkSpec
    options: RunOptions
    timer: Timer
    log: Callable[[str], None] = print
    csv_stream: TextIO | None = None  # --output -: where the rows go (stdout)

    def run(self) -> int:
        spec, options = self.spec, self.options
        fields = csv_fieldnames((*spec.case_fields, IMPL_COLUMN))
        writer = (
            ResultStreamWriter(self.csv_stream, fields)
            if self.csv_stream is not None
            else ResultCsvWriter(options.output, fields)
        )
        store = ResultStore(writer, (*spec.case_fields, IMPL_COLUMN), options.resume)
        todo = list(options.cases)
        if options.resume:
            store.rows = load_resume_rows(options.output, spec, options)
            # The rows are in the store now: a plugin worker is sent the options without them.
            self.options = options = replace(options, resumed=None)
            remove_stale_temporaries(options.output)
            todo, stale = resume_todo(todo, store.rows, spec.case_fields, options.impls)
            note = (
                f"; {counted(stale, 'ok case')} measured by another harness version "
                f"{'is' if stale == 1 else 'are'} measured again"
                if stale
                else ""
            )
            self.log(
                f"Resuming {options.output}: {len(options.cases) - len(todo)} of {counted(len(options.cases), 'case')} already ok{note}"
            )
            if stale:  # their rows are about to be replaced: the old measurements stay readable
                self.log(f"Kept the file as it was in {back_up(options.output)}")
            if not todo:
                return 0
        else:
            files = [p for p in (options.output, options.samples) if p and not writes_stdout(p)]
            for path in files:
                if os.path.lexists(path):  # plan allowed it: --force
                    self.log(f"Moved the existing {path} aside to {move_aside(path)}")
        metadata = {
            "run_id": self._run_id(store),
            **environment_columns(options, code_directory(spec.prepare)),
            **method_columns(self.timer),
            **shard_columns(options.shard),
        }
        roofline = load_roofline(options, str(metadata["device"]))
        return self._loop(todo, store, metadata, roofline)

    def _run_id(self, store: ResultStore) -> str:
        """A resumed CSV's own id (its rows and the new ones stay one run), else the id the
        caller gives (bench_all.py, a launcher's shards), else a fresh one."""
        recorded = [row.get("run_id", "") for row in store.rows.values()]
        return next((text for text in recorded if text), "") or self.options.run_id or new_run_id()

    def _loop(self, todo, store, metadata, roofline) -> int:
        spec, options = self.spec, self.options
        power = open_power_monitor(options.device)
        telemetry = open_telemetry(options.device)
        energy = (
            open_energy_counter(options.device)
            if options.energy
            else EnergyAccess(None, reason="not read (--no-energy)")
        )
        runner = case_runner_class(options.isolation, options.impls, self.timer)(
            spec, options, self.timer, self.log, power=power, telemetry=telemetry, energy=energy
        )
        try:
            return self._cases(runner, todo, store, metadata, roofline)
        finally:
            getattr(runner, "close", lambda: None)()  # the plugin worker, if there is one

    def _cases(self, runner, todo, store, metadata, roofline) -> int:
        spec, options = self.spec, self.options
        freeze_startup_objects()
        peaks = reference_peaks(options.peak_bandwidth, options.peak_tflops, options.dtype_name)
        calls_ms = [_predicted_call_ms(spec, case, options.dtype_name, peaks) for case in todo]
        eta = Eta(calls_ms, options.timing)
        progress = Progress.start(len(todo) * len(options.impls), eta)
        failed, index, started = 0, 0, time.monotonic()
        slower: list[str] = []
        tally: dict[str, list[PairedRatio]] = {}
        try:
            for index, case in enumerate(todo, 1):
                text = case_text(case, spec.case_fields)
                records, results = self._one(runner, case, metadata)
                eta.case_finished(_call_ms(records))
                for record, result in zip(records, results, strict=True):
                    record.update(roofline.columns(record))
                    store.put(record)
                    where = f"{text} [{record[IMPL_COLUMN]}]" if options.paired else text
                    progress.finished(summary_line(index, len(todo), where, record))
                    if result.notes:
                        progress.line("\n".join(result.notes))
                    if record["status"] != STATUS_OK:
                        failed += 1
                        progress.line(f"  repro: {record['repro']}")
                if options.paired:
                    progress.line(paired_line(options, results))
                    slower += self._gate(text, results)
                    for impl, result in zip(options.impls, results, strict=True):
                        if result.ratio is not None:
                            tally.setdefault(impl.name, []).append(result.ratio)
                if any(r["status"] != STATUS_OK for r in records):
                    release_memory(options.device)
                elif options.device.type == "cuda":
                    torch.cuda.empty_cache()  # the next case's inputs get unfragmented memory
        except KeyboardInterrupt:
            progress.close()
            where = (
                case_text(todo[index - 1], spec.case_fields) if index else "before the first case"
            )
            self.log(
                f"\nInterrupted at case {index}/{len(todo)} ({where}); the CSV holds every finished case."
            )
            if writes_stdout(options.output):
                self.log("The rows of every finished case went to stdout.")
                return 130
            saved = (
                f"Results saved to {options.output}"
                if os.path.exists(options.output)
                else "No case finished yet"
            )
            self.log(f"{saved}; continue with:")
            self.log(f"  {options.resume_command_of(spec)}")
            return 130
        progress.close()
        self.log(_cost_line(runner, time.monotonic() - started))
        where = (
            "written to stdout" if writes_stdout(options.output) else f"saved to {options.output}"
        )
        self.log(f"\nResults {where}")
        for line in tally_lines(options.impls[options.baseline].name, tally):
            self.log(line)
        if failed:
            what = "row" if options.paired else "case"
            self.log(f"{failed} of {counted(len(todo) * len(options.impls), what)} failed")
        for line in slower:
            self.log(line)
        return 1 if failed or slower else 0

    def _gate(self, text: str, results: Sequence[CaseResult]) -> list[str]:
        """--fail-if-slower: one line per implementation slower beyond the threshold."""
        pct = self.options.fail_if_slower_pct
        if pct is None:
            return []
        return [
            f"--fail-if-slower {pct:g}: {impl.name} is slower than "
            f"{self.options.impls[self.options.baseline].name} on {text} "
            f"(ratio {result.ratio.ratio:.4f}, 95% interval "
            f"{result.ratio.interval[0]:.4f}-{result.ratio.interval[1]:.4f})"
            for impl, result in zip(self.options.impls, results, strict=True)
            if result.ratio is not None and result.ratio.slower_beyond(pct)
        ]

    def _one(self, runner: CaseRunner, case, metadata) -> tuple[list[dict], tuple[CaseResult, ...]]:
        known = {
            **metadata,
            "repro": self.options.repro_command(self.spec, case),
            **serving.shape_columns(case),  # known before the run: failed rows carry them too
        }
        impls = self.options.impls
        try:
            io_bytes, flops = case_work(self.spec, case, self.options)
        except Exception as exc:  # noqa: BLE001 - a broken formula fails its case only
            results = tuple(CaseResult(None, {}, error=exc) for _ in impls)
        else:
            known.update(io_bytes=io_bytes, flops=flops)
            results = runner(case)
            if self.options.imbalance:
                results = with_uniform_twin(runner, case, results)
        records = []
        for impl, result in zip(impls, results, strict=True):
            metrics = None if result.error else (result.measurement.median, io_bytes, flops)
            record = result_record(
                self.spec.api,
                {**case, IMPL_COLUMN: impl.name},
                metrics=metrics,
                columns=result.columns,
                metadata={**known, "backend": backend_column(impl)},
                error=result.error,
            )
            record["error"] = clip_error(str(record["error"]))
            record["timestamp_utc"] = timestamp_utc()
            if self.options.samples and record["status"] == STATUS_OK:
                line = samples_line(
                    record,
                    self.spec.case_fields,
                    result.measurement.samples,
                    result.round_medians_ms,
                )
                append_samples(self.options.samples, line)
            records.append(record)
        return records, results


def _predicted_call_ms(spec: BenchmarkSpec, case, dtype_name: str, peaks: CostPeaks) -> float:
    """The case's predicted call time for the ETA; 0 (its fixed costs only) where the
    script's formulas fail on it (the case then fails and says why)."""
    try:
        return case_call_ms(spec, case, dtype_name, peaks)
    except Exception:  # noqa: BLE001 - a broken formula fails its case, not the sweep
        return 0.0


def _call_ms(records: Sequence[Mapping[str, object]]) -> float | None:
    """The case's measured call time: the mean over its ok rows (its implementations)."""
    times = [float(r["time_ms"]) for r in records if r["status"] == STATUS_OK]
    return sum(times) / len(times) if times else None


def paired_line(options: RunOptions, results: Sequence[CaseResult]) -> str:
    """The case's head-to-head line: each implementation's ratio to the baseline, its 95 %
    interval and verdict."""
    base = options.impls[options.baseline].name
    parts = []
    for impl, result in zip(options.impls, results, strict=True):
        ratio = result.ratio
        if impl.name == base or ratio is None:
            continue
        interval = (
            f"[{ratio.interval[0]:.4f}, {ratio.interval[1]:.4f}] {ratio.verdict}"
            if ratio.interval is not None
            else "(too few rounds for an interval)"
        )
        energy = _energy_ratio_text(result.columns)
        parts.append(
            f"{impl.name}/{base} {ratio.ratio:.4f} {interval} ({counted(ratio.rounds, 'round')}){energy}"
        )
    return "  paired: " + (
        "; ".join(parts) if parts else "no ratio (the baseline or all others failed)"
    )


def _energy_ratio_text(columns: Mapping[str, object]) -> str:
    """ ", energy 0.9120 [0.9050, 0.9210]" beside the time ratio, when the row has one."""
    ratio = columns.get("paired_energy_ratio")
    if ratio is None:
        return ""
    low, high = columns.get("paired_energy_ratio_lo"), columns.get("paired_energy_ratio_hi")
    interval = f" [{low:.4f}, {high:.4f}]" if low is not None and high is not None else ""
    return f", energy {ratio:.4f}{interval}"


def tally_lines(base: str, ratios: Mapping[str, Sequence[PairedRatio]]) -> list[str]:
    """The sweep's head-to-head result: per implementation, its cases by verdict against the
    baseline and the geometric mean of its paired ratios."""
    lines = []
    for name, found in ratios.items():
        verdicts = [ratio.verdict for ratio in found]
        counts = [f"{verdicts.count(v)} {v}" for v in (FASTER, SAME, SLOWER)]
        if "" in verdicts:
            counts.append(f"{verdicts.count('')} without an interval")
        geomean = math.exp(sum(math.log(ratio.ratio) for ratio in found) / len(found))
        lines.append(
            f"Head to head, {name}/{base} over {counted(len(found), 'case')}: "
            f"{', '.join(counts)}; "
            f"geomean ratio {geomean:.4f}"
        )
    return lines


def _cost_line(runner: CaseRunner, wall_s: float) -> str:
    """How much of the sweep's wall time was spent inside timed runs, and where the rest went."""
    timed_s = runner.timed_ms / 1e3
    ratio = f"{wall_s / timed_s:.1f}x" if timed_s > 0 else "n/a"
    line = f"Sweep wall time {wall_s:.1f} s; time inside timed runs {timed_s:.2f} s (wall/timed {ratio})"
    if runner.batch_gpu_ms > 0:
        line += (
            f"; GPU busy in timed batches {runner.batch_gpu_ms / 1e3:.2f} s (L2 flushes included)"
        )
    if runner.phases.seconds:
        line += f"; by phase: {runner.phases.describe()}"
    return line
