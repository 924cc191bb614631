"""Render step: Markdown from a report model, cut to a size limit (``markdown_text``).

Renderers only format what the models hold.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from fi_attn_bench.results.schema import NUMERIC_COLUMNS
from fi_attn_bench.summarizer.contest import contest_markdown
from fi_attn_bench.summarizer.markdown_text import (
    Block,
    Table,
    cell,
    format_delta,
    format_metric,
    render,
)
from fi_attn_bench.summarizer.model import (
    BEST_LOWEST,
    PEAK_PCT_LIMIT,
    SummaryModel,
    plural,
    values_text,
)
from fi_attn_bench.summarizer.regression import Selection, condition_text, energy_cases
from fi_attn_bench.summarizer.run_noise import NOISE_SIGMAS

GATE_RULE = (
    "A case is a `regression` when time_ms grows, or bandwidth_GB_s or tflops shrink, "
    "by more than the gate, and the change is significant: with raw samples of both "
    "sides, a two-sided Mann–Whitney U test at p < {alpha:g}; else the change must exceed "
    "the uncertainty of the two medians (root sum of squares of their 95 % half-widths: "
    "`drift_pct`, else {notch:g} × IQR / √samples). A change past the gate that is not "
    "significant is `within noise` and does not fail the run. Rows without statistics "
    "are judged by the gate alone. Improvements never fail."
)
RUN_NOISE_RULE = (
    " With --noise-from, a case with a history ({known} here) must also move more than "
    "{sigmas:g} × √2 × its run-to-run noise there: two runs of the same code differ that much."
)
COMPATIBILITY_NOTE = (
    "- `legacy_inferred_ok` means the legacy CSV had no explicit status column; success "
    "was inferred only after validating its known FlashInfer schema and performance metrics."
)
MATCHED_HEAD = (
    "| API | Case | State | Time ms (base → cand, Δ) | "
    "Bandwidth GB/s (base → cand, Δ) | TFLOPS (base → cand, Δ) | Sources |"
)


def issue_table(issues) -> list[Block | Table]:
    if not issues:
        return []
    rows = (f"- **{cell(i.group)}** — {cell(i.source)}: {cell(i.message)}" for i in issues)
    return [Table(["## Input Errors", ""], rows, len(issues), "input errors")]


def failure_table(failures, with_run: bool) -> list[Block | Table]:
    if not len(failures):
        return []
    head = (
        "| Run | API | Case | Source | Error |" if with_run else "| API | Case | Source | Error |"
    )
    rule = "|---|---|---|---|---|" if with_run else "|---|---|---|---|"
    columns = (["run"] if with_run else []) + ["api", "case", "source", "error"]
    rows = (
        "| " + " | ".join(cell(value) for value in values) + " |"
        for values in zip(*(failures[name].tolist() for name in columns), strict=True)
    )
    return [Table(["## Failure Details", "", head, rule], rows, len(failures), "failures")]


def plot_block(links: list[str]) -> list[Block]:
    if not links:
        return []
    return [Block(["## Plots", "", *(f"![{cell(link)}]({link})" for link in links), ""])]


# ---------------------------------------------------------------------- summary


def summary_markdown(
    model: SummaryModel, limit: int, plots: list[str] = (), only_changed: bool = False
) -> str:
    """The summary report: verdict and counts first, long lists after."""
    parts: list[Block | Table] = [Block(_summary_head(model))]
    parts += issue_table(model.issues)
    parts += failure_table(model.failures, with_run=False)
    parts.append(_input_files(model))
    parts.append(_api_sections(model))
    parts += head_to_head_tables(model.head_to_head)
    parts += contest_markdown(model.contest)
    parts += _case_results(model)
    parts += _noisy_rows(model)
    parts += _artefact_table(model.artefacts)
    parts += _environment_block({"Value": model.environment})
    if model.legacy_rows:
        parts.append(Block(["## Compatibility Note", "", COMPATIBILITY_NOTE, ""]))
    parts += plot_block(list(plots))
    return render(parts, limit)


def _summary_head(model: SummaryModel) -> list[str]:
    lines = [
        "# FlashInfer Benchmark Summary",
        "",
        f"**Verdict: {model.verdict.label.upper()}** — {cell(model.reason)}",
        "",
        *warning_lines(model.warnings),
        f"- Input files: {len(model.paths)}",
        f"- Valid files: {model.valid_files}"
        + (
            f" ({model.older_files} of them {_older(model.older_files)}, left out)"
            if model.older_files
            else ""
        ),
        f"- Total rows: {model.total_rows}",
    ]
    if model.noisy:
        lines.append(
            f"- Noisy rows: {len(model.noisy)} (noise above the target when their time "
            "budget ran out; listed under Noisy Rows)"
        )
    if model.run_note:
        lines.append(f"- Runs: {cell(model.run_note)}")
    if len(model.artefacts):
        lines.append(
            f"- Measurement artefacts: {plural(len(model.artefacts), 'row')} above "
            f"{PEAK_PCT_LIMIT:g}% of a hardware peak (e.g. L2 cache hits); not counted as speed"
        )
    return [*lines, ""]


def _input_files(model: SummaryModel) -> Table:
    rows = (f"| {cell(f.source)} | {f.rows} | {cell(f.status)} |" for f in model.files)
    head = ["## Input Files", "", "| File | Rows | Status |", "|---|---:|---|"]
    return Table(head, rows, len(model.files), "input files")


def _api_sections(model: SummaryModel) -> Table:
    rows = (_api_section(api, first=index == 0) for index, api in enumerate(model.apis))
    return Table([], rows, len(model.apis), "API sections")


def _api_section(api, first: bool) -> str:
    lines = [] if first else [""]
    lines += [
        f"## API: {cell(api.api)}",
        "",
        f"- Rows: {api.rows}",
        f"- Status: {cell(api.status)}",
    ]
    for best in api.best:
        label = "Minimum" if best.column in BEST_LOWEST else "Maximum"
        lines.append(
            f"- {label} {best.column}: {format_metric(best.value)} "
            f"({cell(best.case)}; source={cell(best.source)})"
        )
    if api.artefacts:
        lines.append(
            f"- Measurement artefacts: {plural(api.artefacts, 'row')} above {PEAK_PCT_LIMIT:g}% of "
            "peak, left out of the maxima"
        )
    return "\n".join(lines)


def _noisy_rows(model: SummaryModel) -> list[Table]:
    if not model.noisy:
        return []
    head = ["## Noisy Rows", "", "| API | Case | Note |", "|---|---|---|"]
    rows = (f"| {cell(r.api)} | {cell(r.case)} | {cell(r.note)} |" for r in model.noisy)
    return [Table(head, rows, len(model.noisy), "noisy rows")]


def _case_results(model: SummaryModel) -> list[Table]:
    if model.cases is None or not len(model.cases):
        return []
    head = [
        "## Case Results",
        "",
        "| API | Case | Status | Time ms | Bandwidth GB/s | TFLOPS |",
        "|---|---|---|---:|---:|---:|",
    ]
    return [Table(head, _case_result_lines(model.cases), len(model.cases), "case results")]


def _case_result_lines(cases) -> Iterator[str]:
    for start in range(0, len(cases), CHUNK_ROWS):
        for row in cases.rows(start, start + CHUNK_ROWS):
            yield (
                f"| {cell(row.api)} | {cell(row.case)} | {cell(row.status)} | "
                f"{_number(row.time_ms)} | {_number(row.bandwidth_GB_s)} | {_number(row.tflops)} |"
            )


def head_to_head_tables(comparisons) -> list[Block | Table]:
    """Per API: time per implementation, speedup against the baseline one (with its
    paired 95 % interval), the winner; then the geomean speedups."""
    parts: list[Block | Table] = []
    for api in comparisons:
        names = [cell(impl) for impl in api.impls]
        head = [
            f"## Head to Head: {cell(api.api)}",
            "",
            f"Speedup over {names[0]} (above 1: faster than the baseline implementation) = "
            "1 / paired ratio with its [95 % interval] and verdict where the rounds were "
            f"interleaved, else {names[0]} time / implementation time. Winner: the fastest "
            "where the verdicts back it, else tie.",
            "",
            "| Case | "
            + " | ".join(f"{name} ms" for name in names)
            + " | "
            + " | ".join(f"{name} speedup" for name in names[1:])
            + " | Winner |",
            "|---|" + "---:|" * (2 * len(names) - 1) + "---|",
        ]
        rows = (_head_to_head_line(api, case) for case in api.cases)
        parts.append(Table(head, rows, len(api.cases), f"{api.api} cases"))
        geomean = ", ".join(
            f"{cell(impl)} {_ratio(api.geomean_speedup[impl])}" for impl in api.impls[1:]
        )
        lines = [f"Geomean speedup over {cell(api.impls[0])}: {geomean}"]
        counts = _verdict_counts(api)
        if counts:
            lines.append(f"Verdicts against {cell(api.impls[0])}: {counts}")
        parts.append(Block([*lines, ""]))
    return parts


def _head_to_head_line(api, case) -> str:
    found = {result.impl: result for result in case.results}
    times = [_number(found[impl].time_ms) if impl in found else "n/a" for impl in api.impls]
    speedups = [_speedup_cell(found.get(impl)) for impl in api.impls[1:]]
    return f"| {cell(case.case)} | " + " | ".join(times + speedups) + f" | {cell(case.winner)} |"


def _speedup_cell(result) -> str:
    if result is None:
        return "n/a"
    text = _ratio(result.speedup)
    if result.speedup_lo == result.speedup_lo and result.speedup_hi == result.speedup_hi:
        text += f" [{result.speedup_lo:.3f}, {result.speedup_hi:.3f}]"
    return f"{text} {result.verdict}" if result.verdict else text


def _verdict_counts(api) -> str:
    """Per non-baseline implementation, its cases by paired verdict ('' without any)."""
    parts = []
    for impl in api.impls[1:]:
        verdicts = api.cases.verdicts_of(impl)
        found = [f"{verdicts.count(v)} {v}" for v in ("faster", "same", "slower") if v in verdicts]
        if found:
            parts.append(f"{cell(impl)} " + ", ".join(found))
    return "; ".join(parts)


def _artefact_table(artefacts) -> list[Table]:
    if not len(artefacts):
        return []
    head = [
        "## Measurement Artefacts",
        "",
        f"Rows above {PEAK_PCT_LIMIT:g}% of the device's peak bandwidth or TFLOPS cannot be "
        "speeds: usually the data stayed in L2 cache between timed calls. They are left out "
        "of the maxima above.",
        "",
        "| API | Case | Source | bandwidth_GB_s | % of peak BW | % of peak TFLOPS |",
        "|---|---|---|---:|---:|---:|",
    ]
    rows = (
        f"| {cell(api)} | {cell(case)} | {cell(source)} | "
        f"{_number(bw)} | {_number(pct_bw)} | {_number(pct_tf)} |"
        for api, case, source, bw, pct_bw, pct_tf in zip(
            *(artefacts[name].tolist() for name in artefacts.columns), strict=True
        )
    )
    return [Table(head, rows, len(artefacts), "artefact rows")]


def _number(value) -> str:
    return "n/a" if value != value else format_metric(value)


def _environment_block(sides: dict[str, dict[str, list[str]]]) -> list[Block]:
    names = sorted({name for side in sides.values() for name in side})
    if not names:
        return []
    lines = ["## Environment", "", "| Column | " + " | ".join(sides) + " |"]
    lines.append("|---|" + "---|" * len(sides))
    for name in names:
        cells = [cell(values_text(side.get(name, ["unknown"]))) for side in sides.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [Block([*lines, ""])]


# ------------------------------------------------------------------- regression


def regression_markdown(
    model, limit: int, plots: list[str] = (), only_changed: bool = False
) -> str:
    """The regression report: verdict, aggregates, regressions, failures, then all cases."""
    parts: list[Block | Table] = [Block(_regression_head(model))]
    parts.append(_aggregate_table(model.aggregates))
    parts += _regression_rows(model)
    parts += _large_change_rows(model)
    parts += _condition_rows(model)
    parts += _energy_rows(model)
    parts += failure_table(model.failures, with_run=True)
    parts += _case_list(
        "## Missing Candidate Cases", model, model.missing, "baseline", "missing cases"
    )
    parts += _case_list("## New Candidate Cases", model, model.new, "candidate", "new cases")
    parts += issue_table(model.issues)
    parts += _environment_block(
        {"Baseline": model.environment["baseline"], "Candidate": model.environment["candidate"]}
    )
    parts.append(_matched_table(model, only_changed))
    parts += plot_block(list(plots))
    return render(parts, limit)


def _regression_head(model) -> list[str]:
    lines = [
        "# FlashInfer Benchmark Regression",
        "",
        f"**Verdict: {model.verdict.label.upper()}** — {cell(model.reason)}",
        "",
    ]
    lines += warning_lines(model.warnings)
    lines += _allowed_lines(model)
    counts = ", ".join(f"{state}={count}" for state, count in sorted(model.state_counts.items()))
    lines += [
        f"- Baseline files: {len(model.baseline_paths)}",
        f"- Candidate files: {len(model.candidate_paths)}",
        f"- Matched cases: {len(model.matched)}",
        f"- Missing candidate cases: {len(model.missing)}",
        f"- New candidate cases: {len(model.new)}",
        f"- Regression gate: {model.gate.text}",
        *(f"- Runs: {cell(note)}" for note in model.run_notes),
    ]
    if model.gate.energy_threshold_pct is not None:
        lines.append(f"- Energy gate: energy_mJ up more than {model.gate.energy_threshold_pct:g}%")
    lines.append(f"- Case states: {counts or 'none'}")
    if model.artefact_rows:
        lines.append(
            f"- Measurement artefacts: {plural(model.artefact_rows, 'row')} above {PEAK_PCT_LIMIT:g}% "
            "of a hardware peak (e.g. L2 cache hits); their bandwidth is not a speed"
        )
    rules = model.gate.rules
    rule = GATE_RULE.format(alpha=rules.alpha, notch=rules.notch)
    noise = np.asarray(model.matched["run_noise_pct"], dtype=float)
    if np.isfinite(noise).any():
        rule += RUN_NOISE_RULE.format(sigmas=NOISE_SIGMAS, known=int(np.isfinite(noise).sum()))
    return [*lines, "", f"Gate rule: {rule}", ""]


def warning_lines(warnings) -> list[str]:
    """Each of the model's warnings as a quoted line, before anything else."""
    lines = []
    for warning in warnings:
        lines += [f"> **Warning: {cell(warning.headline)}** — {cell(warning.detail)}", ""]
    return lines


def _allowed_lines(model) -> list[str]:
    """What --allow-difference let differ, and whether it did."""
    if not model.allowed_differences:
        return []
    text = cell("; ".join(model.allowed_differences))
    return [f"> **Allowed differences (--allow-difference):** {text}", ""]


def _energy_rows(model) -> list[Block | Table]:
    """Matched cases with energy on a side: the energy change beside the time change."""
    rows, without = energy_cases(model.matched)
    pct = model.gate.energy_threshold_pct
    if not len(rows) and pct is None:
        return []
    gate = f"energy_mJ up more than {pct:g}% fails the run" if pct is not None else "not gated"
    head = [
        "## Energy",
        "",
        f"Energy per call (energy_mJ) beside time, largest rise first; {gate} "
        "(--fail-on-energy-regression). A side without energy reads `no energy` and never "
        "fails the gate.",
        "",
        "| API | Case | Time Δ | Energy Δ | Energy mJ (base → cand) | Gate |",
        "|---|---|---:|---:|---|---|",
    ]
    lines = _energy_lines(model, Selection(model.matched, rows))
    parts: list[Block | Table] = [Table(head, lines, len(rows), "energy cases")]
    if without:
        parts.append(
            Block([f"{without} matched case(s) without energy on either side: no energy", ""])
        )
    return parts


def _energy_lines(model, table) -> Iterator[str]:
    names = ("api", "time_ms_delta_pct", "energy_mJ_delta_pct", "energy_mJ_baseline")
    names += ("energy_mJ_candidate", "energy_regression")
    for chunk, labels in _labelled_chunks(model, table):
        columns = [chunk[name].tolist() for name in names]
        for label, values in zip(labels, zip(*columns, strict=True), strict=True):
            api, time_delta, delta, base, cand, regressed = values
            gate = "over the gate" if regressed else ("no energy" if delta != delta else "")
            yield (
                f"| {cell(api)} | {cell(label)} | {_delta_text(time_delta)} | "
                f"{_energy_text(delta, format_delta)} | {_energy_text(base, format_metric)} → "
                f"{_energy_text(cand, format_metric)} | {gate} |"
            )


def _energy_text(value: float, shown) -> str:
    return "no energy" if value != value else shown(value)


def _aggregate_table(aggregates) -> Table:
    head = [
        "## Aggregate Speedup",
        "",
        "Speedup = baseline time_ms / candidate time_ms over the cases ok in both runs "
        "(above 1: the candidate is faster); total time ratio = candidate total / baseline total.",
        "",
        "| Scope | Cases ok in both | Geomean speedup | Total time ms (base → cand) | "
        "Total time ratio |",
        "|---|---:|---:|---|---:|",
    ]
    rows = (
        f"| {cell(agg.scope)} | {agg.cases} | {_ratio(agg.geomean_speedup)} | "
        f"{format_metric(agg.baseline_total_ms)} → {format_metric(agg.candidate_total_ms)} | "
        f"{_ratio(agg.total_time_ratio)} |"
        for agg in aggregates
    )
    return Table(head, rows, len(aggregates), "aggregate rows")


def _ratio(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}x"


CHUNK_ROWS = 1024


def _labelled_chunks(model, table) -> Iterator:
    """The table in chunks, each with its case labels (made only for rows shown)."""
    for start in range(0, len(table), CHUNK_ROWS):
        chunk = table.iloc[start : start + CHUNK_ROWS]
        yield chunk, model.case_labels(chunk["case_id"]).tolist()


def _regression_rows(model) -> list[Table]:
    rows = model.regressions()
    if not len(rows):
        return []
    head = [
        "## Regressions",
        "",
        "Worst first.",
        "",
        "| API | Case | Speedup | Why | Run conditions |",
        "|---|---|---:|---|---|",
    ]
    return [Table(head, _regression_lines(model, rows), len(rows), "regressions")]


def _large_change_rows(model) -> list[Table]:
    """Without a gate, cases significantly slower by large_change_pct or more."""
    if model.gate.threshold_pct is not None:
        return []
    rows = model.large_changes()
    if not len(rows):
        return []
    pct = model.gate.rules.large_change_pct
    head = [
        f"## Large Changes ({pct:g}% or more slower; not gated)",
        "",
        "| API | Case | Speedup | Why | Run conditions |",
        "|---|---|---:|---|---|",
    ]
    return [Table(head, _regression_lines(model, rows), len(rows), "large changes")]


CONDITION_NAMES = (
    "power_capped_pct_baseline",
    "power_capped_pct_candidate",
    "sm_clock_mean_MHz_baseline",
    "sm_clock_mean_MHz_candidate",
)


def _condition_rows(model) -> list[Table]:
    """Cases whose baseline and candidate ran under clearly different conditions."""
    rows = np.flatnonzero(np.asarray(model.matched["conditions_differ"], dtype=bool))
    if not len(rows):
        return []
    rules = model.gate.rules
    head = [
        "## Run Conditions Differ",
        "",
        f"power_capped_pct apart by more than {rules.power_capped_diff_pp:g} points, or "
        f"sm_clock_mean_MHz by more than {rules.sm_clock_diff_pct:g}%: the change of these "
        "cases may be the machine's, not the kernel's.",
        "",
        "| API | Case | Time Δ | Run conditions |",
        "|---|---|---:|---|",
    ]
    lines = _condition_lines(model, Selection(model.matched, rows))
    return [Table(head, lines, len(rows), "cases run under other conditions")]


def _condition_lines(model, table) -> Iterator[str]:
    for chunk, labels in _labelled_chunks(model, table):
        texts = _condition_texts(model, chunk)
        for api, label, delta, text in zip(
            chunk["api"].tolist(), labels, chunk["time_ms_delta_pct"].tolist(), texts, strict=True
        ):
            yield f"| {cell(api)} | {cell(label)} | {_delta_text(delta)} | {cell(text)} |"


def _condition_texts(model, chunk) -> list[str]:
    columns = [chunk[name].tolist() for name in CONDITION_NAMES]
    return [condition_text(*values, model.gate.rules) for values in zip(*columns, strict=True)]


def _delta_text(value: float) -> str:
    return "n/a" if value != value else format_delta(value)


def _regression_lines(model, rows) -> Iterator[str]:
    names = ("api", "speedup", "reason_metric", "uncertainty_pct", "p_value", "run_noise_pct")
    for chunk, labels in _labelled_chunks(model, rows):
        deltas = {metric: chunk[f"{metric}_delta_pct"].tolist() for metric in NUMERIC_COLUMNS}
        notes = _condition_texts(model, chunk)
        for index, (api, speedup, metric, uncertainty, p_value, noise) in enumerate(
            zip(*(chunk[name].tolist() for name in names), strict=True)
        ):
            conditions = notes[index]
            why = reason_text(
                metric or "time_ms", deltas, index, uncertainty, p_value, model.gate, noise
            )
            yield (
                f"| {cell(api)} | {cell(labels[index])} | {_ratio(speedup)} | {cell(why)} | "
                f"{cell(conditions)} |"
            )


def reason_text(
    metric: str, deltas, index: int, uncertainty, p_value, gate, noise=float("nan")
) -> str:
    """Why a case is listed: its change, the gate, and the evidence it is real."""
    text = f"{metric} {_delta_text(deltas[metric][index])}"
    if gate.threshold_pct is not None:
        text += f" past the {gate.threshold_pct:g}% gate"
    if p_value == p_value:
        text += f"; Mann–Whitney p = {p_value:.2g}"
    elif uncertainty == uncertainty:
        text += f"; medians' uncertainty ±{uncertainty:.2f}%"
    if noise == noise:
        text += f"; run-to-run noise {noise:.2f}% (history)"
    return text


def _case_list(heading: str, model, cases, side: str, what: str) -> list[Table]:
    if not len(cases):
        return []
    return [Table([heading, ""], _case_lines(model, cases, side), len(cases), what)]


def _case_lines(model, cases, side: str) -> Iterator[str]:
    for chunk, labels in _labelled_chunks(model, cases):
        for api, label, source in zip(
            chunk["api"].tolist(), labels, chunk["source"].tolist(), strict=True
        ):
            yield (f"- {cell(api)}: {cell(label)} ({side} source={cell(source)})")


def _matched_table(model, only_changed: bool = False) -> Table:
    table = model.matched
    title = "## Matched Cases"
    if only_changed:
        changed = np.flatnonzero(np.asarray(model.matched["changed"], dtype=bool))
        table = Selection(model.matched, changed)
        title = "## Changed Cases (--only-changed)"
    head = [
        title,
        "",
        "By API and case parameters.",
        "",
        MATCHED_HEAD,
        "|---|---|---|---|---|---|---|",
    ]
    return Table(head, _matched_rows(model, table), len(table), "matched cases")


def _matched_rows(model, table) -> Iterator[str]:
    names = ["api", "state", "source_baseline", "source_candidate"]
    for name in NUMERIC_COLUMNS:
        names += [f"{name}_baseline", f"{name}_candidate", f"{name}_delta_pct"]
    for chunk, labels in _labelled_chunks(model, table):
        columns = [chunk[name].tolist() for name in names]
        for label, values in zip(labels, zip(*columns, strict=True), strict=True):
            api, state, source_b, source_c = values[:4]
            cells = [_metric_cell(*values[4 + 3 * i : 7 + 3 * i]) for i in range(3)]
            yield (
                f"| {cell(api)} | {cell(label)} | {cell(state)} | "
                + " | ".join(cell(text) for text in cells)
                + f" | {cell(f'{source_b} → {source_c}')} |"
            )


def _metric_cell(base: float, cand: float, delta: float) -> str:
    if delta != delta:
        return "n/a"
    return f"{format_metric(base)} → {format_metric(cand)}, {format_delta(delta)}"


def _older(count: int) -> str:
    return "an older run" if count == 1 else "older runs"
