"""The sweep: every selected case in turn, each row stored as soon as it is finished."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fi_attn_bench.cases.selection import case_text
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.device.power import open_power_monitor
from fi_attn_bench.results.schema import (
    STATUS_OK,
    ResultCsvWriter,
    csv_fieldnames,
    execute_benchmark_case,
)
from fi_attn_bench.sweep.case import (
    CaseRunner,
    freeze_startup_objects,
    release_memory,
    static_columns,
)
from fi_attn_bench.sweep.environment import (
    code_directory,
    environment_columns,
    load_roofline,
    timestamp_utc,
)
from fi_attn_bench.sweep.options import RunOptions, repro_command, resume_command
from fi_attn_bench.sweep.outputs import move_aside
from fi_attn_bench.sweep.progress import Progress, clip_error, summary_line
from fi_attn_bench.sweep.samples import append_samples, samples_line
from fi_attn_bench.sweep.storage import (
    ResultStore,
    load_resume_rows,
    remove_stale_temporaries,
    resume_todo,
)
from fi_attn_bench.timing.timers import Timer


@dataclass
class Sweep:
    spec: BenchmarkSpec
    options: RunOptions
    timer: Timer
    log: Callable[[str], None] = print

    def run(self) -> int:
        spec, options = self.spec, self.options
        writer = ResultCsvWriter(options.output, csv_fieldnames(spec.case_fields))
        store = ResultStore(writer, spec.case_fields, options.resume)
        todo = list(options.cases)
        if options.resume:
            store.rows = load_resume_rows(options.output, spec, options)
            remove_stale_temporaries(options.output)
            todo, stale = resume_todo(todo, store.rows, spec.case_fields)
            note = (
                f"; {stale} ok case(s) measured by another harness version are measured again"
                if stale
                else ""
            )
            self.log(
                f"Resuming {options.output}: {len(options.cases) - len(todo)} of {len(options.cases)} cases already ok{note}"
            )
            if not todo:
                return 0
        else:
            for path in (options.output, options.samples):
                if path and os.path.lexists(path):  # plan allowed it: --force
                    self.log(f"Moved the existing {path} aside to {move_aside(path)}")
        metadata = environment_columns(options, code_directory(spec.prepare))
        roofline = load_roofline(options, str(metadata["device"]))
        return self._loop(todo, store, metadata, roofline)

    def _loop(self, todo, store, metadata, roofline) -> int:
        spec, options = self.spec, self.options
        power = open_power_monitor(options.device)
        runner = CaseRunner(spec, options, self.timer, self.log, power=power)
        freeze_startup_objects()
        progress = Progress.start(len(todo))
        failed, index, started = 0, 0, time.monotonic()
        try:
            for index, case in enumerate(todo, 1):
                runner.details, runner.samples = "", ()
                record = self._one(runner, case, metadata, roofline)
                store.put(record)
                text = case_text(case, spec.case_fields)
                progress.finished(summary_line(index, len(todo), text, record))
                if runner.details:
                    progress.line(runner.details)
                if record["status"] != STATUS_OK:
                    failed += 1
                    progress.line(f"  repro: {record['repro']}")
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
            saved = (
                f"Results saved to {options.output}"
                if os.path.exists(options.output)
                else "No case finished yet"
            )
            self.log(f"{saved}; continue with:")
            self.log(f"  {resume_command(spec, options)}")
            return 130
        progress.close()
        self.log(_cost_line(runner, time.monotonic() - started))
        self.log(f"\nResults saved to {options.output}")
        if failed:
            self.log(f"{failed} of {len(todo)} cases failed")
        return 1 if failed else 0

    def _one(self, runner, case, metadata, roofline) -> dict:
        repro = repro_command(self.spec, self.options, case)
        known = {**metadata, "repro": repro, **static_columns(self.spec, case, self.options)}
        record = execute_benchmark_case(self.spec.api, case, lambda: runner(case), known)
        record["error"] = clip_error(str(record["error"]))
        record["timestamp_utc"] = timestamp_utc()
        record.update(roofline.columns(record))
        if self.options.samples and record["status"] == STATUS_OK:
            line = samples_line(record, self.spec.case_fields, runner.samples)
            append_samples(self.options.samples, line)
        return record


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
