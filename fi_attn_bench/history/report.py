"""The dashboard (one self-contained HTML file: data as JSON, charts drawn as inline SVG
by a small script) and a Markdown digest short enough for a pull-request comment."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field, replace
from typing import ClassVar

from fi_attn_bench.history.analysis import (
    Analysis,
    CaseChange,
    CaseSeries,
    case_label,
    change_record,
    least_sensitive,
    sensitivity_note,
    sensitivity_summary,
)
from fi_attn_bench.summarizer import renderers
from fi_attn_bench.summarizer.model import ReportKind

MARKDOWN_CHANGES = 10  # rows of the PR digest; the dashboard lists every change
MARKDOWN_LEAST_SENSITIVE = 3
HTML_TABLE_CHANGES = 200


@dataclass(frozen=True)
class HistoryReport:
    """What the dashboard and the digest show: the analysis and its selected change points,
    largest first."""

    kind: ClassVar[ReportKind] = ReportKind.HISTORY

    analysis: Analysis
    changes: tuple[CaseChange, ...]
    case_filter: dict[str, str] = field(default_factory=dict)  # --cases, as parsed
    since: str = ""  # --since, as given


def series_payload(series: CaseSeries, change_runs: dict) -> dict:
    return {
        "label": html_label(series),
        "api": series.case.api,
        "impl": series.case.impl,
        "fields": series.case.fields,
        "device": series.device,
        "runs": series.run_positions.tolist(),
        "time_us": [float(f"{v * 1000:.5g}") for v in series.time_ms.tolist()],
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


def case_label_md(series: CaseSeries) -> str:
    return case_label(series.case).replace("|", "/")


def html_label(series: CaseSeries) -> str:
    return f"{case_label(series.case)} on {series.device or 'unknown device'}"


def render_html(report: HistoryReport) -> str:
    analysis, changes = report.analysis, list(report.changes)
    position = {id(run): index for index, run in enumerate(analysis.runs)}
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
        "series": [series_payload(series, position) for series in analysis.series],
    }
    data = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    apis = sorted({series.case.api for series in analysis.series})
    options = "".join(
        f'<option value="{html.escape(api)}">{html.escape(api)}</option>' for api in apis
    )
    return _PAGE.format(
        runs=len(analysis.runs),
        series=len(analysis.series),
        changes=len(changes),
        options=options,
        table=changes_table_html(changes[:HTML_TABLE_CHANGES]),
        data=data,
        script=_SCRIPT,
    )


def changes_table_html(changes: list[CaseChange]) -> str:
    rows = []
    for change in changes:
        record = change_record(change)
        rows.append(
            "<tr><td>{size:+.2f} %</td><td>{conf}</td><td>{case}</td><td>{commit}</td><td>{start}</td><td>{scaled}</td></tr>".format(
                size=record["size_pct"],
                conf="" if record["confidence"] is None else f"{record['confidence']:.3f}",
                case=html.escape(record["case"]),
                commit=html.escape(record["commit"][:12]),
                start=html.escape(record["started_utc"]),
                scaled=f"yes ({record['clock_exponent']:.2f})" if record["clock_scaled"] else "no",
            )
        )
    return "".join(rows) or '<tr><td colspan="6">no change point</td></tr>'


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
            f"{case_label_md(series)} ({sensitivity_note(series)})"
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
            lines.append(
                f"| {record['size_pct']:+.2f} % | {confidence} | {record['case'].replace('|', '/')} "
                f"| `{record['commit'][:12]}` | {'yes' if record['clock_scaled'] else 'no'} |"
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
.chart{{display:inline-block;width:420px;margin:6px;vertical-align:top;border:1px solid #ddd;padding:4px}}
.chart h3{{font-size:11px;margin:0 0 2px;font-weight:normal;word-break:break-all}}
.chart svg{{width:410px;height:140px;background:#fafafa}}
.tip{{font-size:11px;color:#555;min-height:14px}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid #ccc;padding:2px 6px;font-size:12px}}
</style></head><body>
<h1>Benchmark history</h1>
<p>{runs} runs, {series} case series, {changes} change point(s). Red lines: change points
(first run at the new level). Hover a chart for the run's commit, SM clock and power-capped share.</p>
<h2>Latest changes, largest first</h2>
<table id="changes"><tr><th>change</th><th>confidence</th><th>case</th><th>commit</th><th>run start (UTC)</th><th>clock-scaled (exponent)</th></tr>{table}</table>
<h2>Trends</h2>
<p><label>API <select id="api"><option value="">all</option>{options}</select></label>
<label>case field <input id="field" placeholder="batch_size=64,impl=flashinfer" size="32"></label>
<span id="shown"></span></p>
<div id="charts"></div>
<script id="data" type="application/json">{data}</script>
<script>{script}</script>
</body></html>
"""

_SCRIPT = r"""
const D = JSON.parse(document.getElementById('data').textContent);
const NS = 'http://www.w3.org/2000/svg', W = 410, H = 140, PAD = 6;
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function draw(s, box) {
  const svg = el('svg', {viewBox: `0 0 ${W} ${H}`}, box);
  const n = D.runs.length, lo = Math.min(...s.time_us), hi = Math.max(...s.time_us);
  const x = r => PAD + (W - 2 * PAD) * (n > 1 ? r / (n - 1) : 0.5);
  const y = t => H - PAD - (H - 2 * PAD) * (hi > lo ? (t - lo) / (hi - lo) : 0.5);
  for (const c of s.changes)
    el('line', {x1: x(c.run), x2: x(c.run), y1: 0, y2: H, stroke: '#d22', 'stroke-width': 1.5, class: 'cp'}, svg);
  const pts = s.runs.map((r, i) => `${x(r).toFixed(1)},${y(s.time_us[i]).toFixed(1)}`).join(' ');
  el('polyline', {points: pts, fill: 'none', stroke: '#1f5fa8', 'stroke-width': 1}, svg);
  const tip = document.createElement('div');
  tip.className = 'tip';
  box.appendChild(tip);
  svg.addEventListener('mousemove', ev => {
    const rect = svg.getBoundingClientRect(), at = (ev.clientX - rect.left) / rect.width * W;
    let best = 0;
    for (let i = 1; i < s.runs.length; i++) if (Math.abs(x(s.runs[i]) - at) < Math.abs(x(s.runs[best]) - at)) best = i;
    const run = D.runs[s.runs[best]];
    tip.textContent = `${run.commit || run.id} ${run.start}: ${s.time_us[best]} us, clock ${s.clock[best] ?? '?'} MHz, power-capped ${s.capped[best] ?? '?'} %`;
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
  h.textContent = s.label + note + (s.changes.length ? ` - ${s.changes.map(c => (c.size > 0 ? '+' : '') + c.size + ' %').join(', ')}` : '');
  box.appendChild(h);
  draw(s, box);
  charts.appendChild(box);
});
function applyFilter() {
  const api = document.getElementById('api').value, terms = document.getElementById('field').value
    .split(',').map(t => t.trim()).filter(t => t.includes('=')).map(t => t.split('=').map(v => v.trim()));
  let shown = 0;
  for (const box of charts.children) {
    const f = JSON.parse(box.dataset.fields);
    const ok = (!api || box.dataset.api === api) && terms.every(([k, v]) => String(f[k] ?? '') === v);
    box.style.display = ok ? '' : 'none';
    box.dataset.shown = ok ? '1' : '0';
    shown += ok;
  }
  document.getElementById('shown').textContent = `${shown} of ${charts.children.length} charts`;
}
const params = new URLSearchParams(location.hash.slice(1));
if (params.get('api')) document.getElementById('api').value = params.get('api');
if (params.get('field')) document.getElementById('field').value = params.get('field');
document.getElementById('api').addEventListener('change', applyFilter);
document.getElementById('field').addEventListener('input', applyFilter);
applyFilter();
"""
