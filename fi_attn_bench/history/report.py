"""The dashboard (one self-contained HTML file: data as JSON, charts drawn as inline SVG
by a small script) and a Markdown digest short enough for a pull-request comment.

Every string from a CSV or the store is escaped for where it goes: Markdown cells by the
summarizer's ``visible_markdown``, the page's data as JSON with ``<``, ``>``, ``&`` and the
line separators as \\u escapes (so no stored ``</script>`` or ``<!--<script>`` can end the
data element), and the page's text set through ``textContent``, never as markup."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field, replace
from typing import ClassVar

from fi_attn_bench.history.analysis import (
    Analysis,
    CaseChange,
    CaseSeries,
    case_label,
    case_matches,
    change_record,
    least_sensitive,
    sensitivity_note,
    sensitivity_summary,
)
from fi_attn_bench.summarizer import renderers
from fi_attn_bench.summarizer.markdown_text import cell, visible_markdown
from fi_attn_bench.summarizer.model import ReportKind

MARKDOWN_CHANGES = 10  # rows of the PR digest; the dashboard lists every change
MARKDOWN_LEAST_SENSITIVE = 3
HTML_MAX_SERIES = 1000  # charts drawn, those with change points first: 200k cases stay small
HTML_MAX_CHANGES = 2000  # change rows embedded; the table shows the first 200 the filter keeps
# JSON inside <script>: these would let a stored string end the element or open a comment.
_SCRIPT_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_HEX = re.compile(r"[0-9a-fA-F]+")


@dataclass(frozen=True)
class HistoryReport:
    """What the dashboard and the digest show: the analysis and its selected change points,
    largest first, and the --cases filter the charts follow."""

    kind: ClassVar[ReportKind] = ReportKind.HISTORY

    analysis: Analysis
    changes: tuple[CaseChange, ...]
    case_filter: dict[str, str] = field(default_factory=dict)  # --cases, as parsed
    since: str = ""  # --since, as given


def case_values(series: CaseSeries) -> dict[str, str]:
    """Everything that names a series: API, device, implementation and case fields."""
    values = {"api": series.case.api, "device": series.device or "unknown device"}
    values.update({k: str(v) for k, v in series.case.fields.items() if v != "" and k != "impl"})
    values["impl"] = series.case.impl
    return values


def common_values(drawn: list[CaseSeries]) -> dict[str, str]:
    """The fields every drawn series has with the same value: said once, not in each title."""
    if len(drawn) < 2:
        return {}
    named = [case_values(series) for series in drawn]
    return {
        name: value
        for name, value in named[0].items()
        if all(values.get(name) == value for values in named[1:])
    }


def chart_title(series: CaseSeries, common: dict[str, str]) -> str:
    """The series' name without the fields every chart shares."""
    values = {k: v for k, v in case_values(series).items() if k not in common}
    impl, api, device = values.pop("impl", ""), values.pop("api", ""), values.pop("device", "")
    fields = ", ".join(f"{k}={v}" for k, v in values.items())
    parts = (f"{api}({fields})" if api else fields, f"[{impl}]" if impl else "", device)
    return " ".join(part for part in parts if part) or "every case"


def drawn_series(report: HistoryReport) -> tuple[list[CaseSeries], int]:
    """The series the page draws (those --cases keeps; with change points first, largest
    first), at most HTML_MAX_SERIES in the store's order, and how many are left out."""
    matching = [s for s in report.analysis.series if case_matches(s.case, report.case_filter)]

    def priority(index: int) -> tuple:
        sizes = [abs(change.size_pct) for change in matching[index].changes]
        return (not sizes, -max(sizes, default=0.0), index)

    chosen = sorted(sorted(range(len(matching)), key=priority)[:HTML_MAX_SERIES])
    return [matching[i] for i in chosen], max(len(matching) - HTML_MAX_SERIES, 0)


def series_payload(series: CaseSeries, title: str, change_runs: dict) -> dict:
    return {
        "title": title,
        "api": series.case.api,
        "impl": series.case.impl,
        "fields": series.case.fields,
        "device": series.device,
        "runs": series.run_positions.tolist(),
        "time_ms": [float(f"{v:.5g}") for v in series.time_ms.tolist()],
        "clock": [None if v != v else round(v) for v in series.clock_MHz.tolist()],
        "capped": [None if v != v else round(v, 1) for v in series.power_capped_pct.tolist()],
        "scaled": series.normalization.scaled,
        "sensitivity": sensitivity_note(series)
        if series.smallest_step_pct == series.smallest_step_pct
        else "",
        "exponent": round(series.normalization.clock_exponent, 2),
        "changes": [
            {
                "run": change_runs[id(change.run)],
                "size": round(change.size_pct, 2),
                "confidence": None
                if change.confidence != change.confidence
                else round(change.confidence, 3),
            }
            for change in series.changes
        ],
    }


def change_payload(change: CaseChange) -> dict:
    """One row of the changes table; the page filters it as it filters the charts."""
    record = change_record(change)
    case = change.case
    return {
        "series": -1 if case is None else 0,  # -1: the run-wide level, shown unfiltered only
        "api": case.api if case else "",
        "impl": case.impl if case else "",
        "fields": case.fields if case else {},
        "case": record["case"],
        "size": record["size_pct"],
        "confidence": record["confidence"],
        "commit": record["commit"][:12],
        "start": record["started_utc"],
        "scaled": record["clock_exponent"] if record["clock_scaled"] else None,
    }


def script_json(value) -> str:
    """``value`` as JSON that no string in it can end the <script> element it sits in."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return re.sub("[<>&\u2028\u2029]", lambda match: _SCRIPT_ESCAPES[match.group()], text)


def render_html(report: HistoryReport) -> str:
    analysis, changes = report.analysis, list(report.changes)
    position = {id(run): index for index, run in enumerate(analysis.runs)}
    drawn, left_out = drawn_series(report)
    common = common_values(drawn)
    payload = {
        "runs": [
            {
                "id": run.run_id,
                "commit": run.commit[:12],
                "branch": run.branch,
                "start": run.started_utc,
            }
            for run in analysis.runs
        ],
        "series": [series_payload(s, chart_title(s, common), position) for s in drawn],
        "changes": [change_payload(change) for change in changes[:HTML_MAX_CHANGES]],
    }
    apis = sorted({series.case.api for series in drawn})
    options = "".join(
        f'<option value="{html.escape(api)}">{html.escape(api)}</option>' for api in apis
    )
    common_text = ", ".join(f"{k}={v}" for k, v in common.items() if v)
    return _PAGE.format(
        runs=len(analysis.runs),
        series=len(analysis.series),
        changes=len(changes),
        common=html.escape(common_text or "nothing in common (each title names its case)"),
        left_out=html.escape(left_out_note(left_out, len(changes))),
        options=options,
        data=script_json(payload),
        script=_SCRIPT,
    )


def left_out_note(series_left_out: int, changes: int) -> str:
    parts = []
    if series_left_out:
        parts.append(
            f"{series_left_out} more series are not drawn (at most {HTML_MAX_SERIES} charts, "
            "those with change points first); draw them with report --cases NAME=VALUE."
        )
    if changes > HTML_MAX_CHANGES:
        parts.append(f"The table holds the {HTML_MAX_CHANGES} largest of {changes} changes.")
    return " ".join(parts)


def markdown_code(text: str) -> str:
    """A commit as inline code when it is one (hex); anything else as escaped text."""
    return f"`{text}`" if _HEX.fullmatch(text) else visible_markdown(text)


def render_markdown(report: HistoryReport) -> str:
    analysis, changes = report.analysis, list(report.changes)
    scaled = sum(series.normalization.scaled for series in analysis.series)
    lines = [
        "## Benchmark history",
        "",
        f"{len(analysis.runs)} runs, {len(analysis.series)} case series "
        f"({scaled} scaled to the SM clock), {len(changes)} change point(s).",
        "",
    ]
    summary = sensitivity_summary(analysis)
    if summary:
        blunt = [
            f"{cell(case_label(series.case))} ({sensitivity_note(series)})"
            for series in least_sensitive(analysis, MARKDOWN_LEAST_SENSITIVE)
        ]
        lines += [
            f"Sensitivity: {summary}." + (" Least: " + "; ".join(blunt) + "." if blunt else ""),
            "",
        ]
    if changes:
        lines += [
            "| change | confidence | case | commit | clock-scaled |",
            "|---:|---:|---|---|---|",
        ]
        for change in changes[:MARKDOWN_CHANGES]:
            record = change_record(change)
            confidence = "" if record["confidence"] is None else f"{record['confidence']:.3f}"
            scaled_text = "yes" if record["clock_scaled"] else "no"
            lines.append(
                f"| {record['size_pct']:+.2f} % | {confidence} | {cell(record['case'])} "
                f"| {markdown_code(record['commit'][:12])} | {scaled_text} |"
            )
        if len(changes) > MARKDOWN_CHANGES:
            lines.append(
                f"\n… {len(changes) - MARKDOWN_CHANGES} smaller change(s) on the dashboard."
            )
    return "\n".join(lines) + "\n"


# The summarizer's formats, with history's own: the same interface renders every report.
HTML = renderers.Renderer("html", history=render_html)
MARKDOWN = replace(renderers.MARKDOWN, history=render_markdown)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fi-attn-bench history</title>
<style>
body{{font:13px system-ui,sans-serif;margin:16px;color:#222}}
.chart{{display:inline-block;width:440px;margin:6px;vertical-align:top;border:1px solid #ddd;padding:4px}}
.chart h3{{font-size:11px;margin:0 0 2px;font-weight:normal;overflow-wrap:break-word}}
.chart svg{{width:440px;height:190px;background:#fafafa}}
.chart svg text{{font-size:9px;fill:#444}}
.tip{{font-size:11px;color:#555;min-height:14px}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid #ccc;padding:2px 6px;font-size:12px}}
</style></head><body>
<h1>Benchmark history</h1>
<p>{runs} runs, {series} case series, {changes} change point(s). Red lines: change points
(first run at the new level). Hover a chart for the run's commit, SM clock and power-capped share.</p>
<p>Every chart: <span id="common">{common}</span>. {left_out}</p>
<p><label>API <select id="api"><option value="">all</option>{options}</select></label>
<label>case field <input id="field" placeholder="batch_size=64,impl=flashinfer" size="32"></label>
<span id="shown"></span></p>
<h2>Latest changes, largest first</h2>
<table id="changes"><thead><tr><th>change</th><th>confidence</th><th>case</th><th>commit</th><th>run start (UTC)</th><th>clock-scaled (exponent)</th></tr></thead><tbody></tbody></table>
<h2>Trends</h2>
<div id="charts"></div>
<script id="data" type="application/json">{data}</script>
<script>{script}</script>
</body></html>
"""

_SCRIPT = r"""
const D = JSON.parse(document.getElementById('data').textContent);
const NS = 'http://www.w3.org/2000/svg', W = 440, H = 190, L = 66, R = 8, T = 8, B = 40, GAP = 6, TABLE_ROWS = 200;
function el(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function ticks(lo, hi) {
  if (!(hi > lo)) { const pad = Math.abs(lo) * 0.01 || 1e-3; lo -= pad; hi += pad; }
  const raw = (hi - lo) / 4, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  const step = (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p, out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
  return {lo: Math.min(lo, out[0]), hi: Math.max(hi, out[out.length - 1]), out};
}
function ms(t) { return `${Number(t.toPrecision(4))} ms`; }
function runLabel(run) { return [(run.start || '?').slice(0, 16).replace('T', ' '), (run.commit || run.id || '').slice(0, 7)]; }
function draw(s, box) {
  const svg = el('svg', {viewBox: `0 0 ${W} ${H}`}, box);
  const n = D.runs.length, first = s.runs[0], last = s.runs[s.runs.length - 1];
  const span = Math.max(last - first, 1);
  const yt = ticks(Math.min(...s.time_ms), Math.max(...s.time_ms));
  const x = r => L + GAP + (W - L - R - GAP) * (last > first ? (r - first) / span : 0.5);
  const y = t => H - B - GAP - (H - B - T - GAP) * (t - yt.lo) / (yt.hi - yt.lo);
  const yAxis = el('g', {class: 'y-axis'}, svg);
  for (const t of yt.out) {
    el('line', {x1: L, x2: W - R, y1: y(t), y2: y(t), stroke: '#e4e4e4'}, yAxis);
    el('text', {x: L - 3, y: y(t) + 3, 'text-anchor': 'end', class: 'tick'}, yAxis, ms(t));
  }
  el('line', {x1: L, x2: L, y1: T, y2: H - B, stroke: '#666'}, yAxis);  // over the gridlines
  el('text', {x: 10, y: (H - B) / 2, transform: `rotate(-90 10 ${(H - B) / 2})`, 'text-anchor': 'middle', class: 'unit'}, yAxis, 'time (ms)');
  const xAxis = el('g', {class: 'x-axis'}, svg);
  el('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: '#666'}, xAxis);
  const marks = [...new Set([0, Math.floor((s.runs.length - 1) / 2), s.runs.length - 1])];
  for (const i of marks) {
    const r = s.runs[i], [date, commit] = runLabel(D.runs[r]);
    const anchor = marks.length > 1 && i === 0 ? 'start' : marks.length > 1 && i === s.runs.length - 1 ? 'end' : 'middle';
    el('line', {x1: x(r), x2: x(r), y1: H - B, y2: H - B + 3, stroke: '#666'}, xAxis);
    const label = el('text', {x: x(r), y: H - B + 13, 'text-anchor': anchor, class: 'run'}, xAxis);
    el('tspan', {x: x(r), dy: 0}, label, date);
    el('tspan', {x: x(r), dy: 11}, label, commit);
  }
  for (const c of s.changes)
    el('line', {x1: x(c.run), x2: x(c.run), y1: T, y2: H - B, stroke: '#d22', 'stroke-width': 1.5, class: 'cp'}, svg);
  const pts = s.runs.map((r, i) => `${x(r).toFixed(1)},${y(s.time_ms[i]).toFixed(1)}`).join(' ');
  el('polyline', {points: pts, fill: 'none', stroke: '#1f5fa8', 'stroke-width': 1}, svg);
  const tip = document.createElement('div');
  tip.className = 'tip';
  box.appendChild(tip);
  svg.addEventListener('mousemove', ev => {
    const rect = svg.getBoundingClientRect(), at = (ev.clientX - rect.left) / rect.width * W;
    let best = 0;
    for (let i = 1; i < s.runs.length; i++) if (Math.abs(x(s.runs[i]) - at) < Math.abs(x(s.runs[best]) - at)) best = i;
    const run = D.runs[s.runs[best]];
    tip.textContent = `${run.commit || run.id} ${run.start}: ${ms(s.time_ms[best])}, clock ${s.clock[best] ?? '?'} MHz, power-capped ${s.capped[best] ?? '?'} %`;
  });
  box.dataset.points = String(s.runs.length);
}
const charts = document.getElementById('charts');
D.series.forEach(s => {
  const box = document.createElement('div');
  box.className = 'chart';
  box.dataset.api = s.api;
  box.dataset.fields = JSON.stringify(Object.assign({api: s.api, impl: s.impl}, s.fields));
  const h = document.createElement('h3');
  const note = (s.scaled ? ` (clock-scaled, exponent ${s.exponent})` : '') + (s.sensitivity ? `; ${s.sensitivity}` : '');
  h.textContent = s.title + note + (s.changes.length ? ` - ${s.changes.map(c => (c.size > 0 ? '+' : '') + c.size + ' %').join(', ')}` : '');
  box.appendChild(h);
  draw(s, box);
  charts.appendChild(box);
});
function matches(api, terms, caseApi, fields) {
  return (!api || caseApi === api) && terms.every(([k, v]) => String(fields[k] ?? '') === v);
}
function fillTable(api, terms) {
  const body = document.querySelector('#changes tbody');
  body.textContent = '';
  const kept = D.changes.filter(c => c.series === -1 ? !api && !terms.length
    : matches(api, terms, c.api, Object.assign({api: c.api, impl: c.impl}, c.fields)));
  for (const c of kept.slice(0, TABLE_ROWS)) {
    const row = body.insertRow();
    const cells = [`${c.size > 0 ? '+' : ''}${c.size.toFixed(2)} %`, c.confidence === null ? '' : c.confidence.toFixed(3),
      c.case, c.commit, c.start, c.scaled === null ? 'no' : `yes (${c.scaled.toFixed(2)})`];
    for (const text of cells) row.insertCell().textContent = text;
  }
  if (!kept.length) { const cell = body.insertRow().insertCell(); cell.colSpan = 6; cell.textContent = 'no change point'; }
  body.dataset.rows = String(kept.length);
}
function applyFilter() {
  const api = document.getElementById('api').value, terms = document.getElementById('field').value
    .split(',').map(t => t.trim()).filter(t => t.includes('=')).map(t => t.split('=').map(v => v.trim()));
  let shown = 0;
  for (const box of charts.children) {
    const ok = matches(api, terms, box.dataset.api, JSON.parse(box.dataset.fields));
    box.style.display = ok ? '' : 'none';
    box.dataset.shown = ok ? '1' : '0';
    shown += ok;
  }
  fillTable(api, terms);
  document.getElementById('shown').textContent = `${shown} of ${charts.children.length} charts`;
}
const params = new URLSearchParams(location.hash.slice(1));
if (params.get('api')) document.getElementById('api').value = params.get('api');
if (params.get('field')) document.getElementById('field').value = params.get('field');
document.getElementById('api').addEventListener('change', applyFilter);
document.getElementById('field').addEventListener('input', applyFilter);
applyFilter();
"""
