"""A pull request's verdict from the regression report's JSON: what to say, and whether to say it.

Pure functions: ``read_verdict`` turns ``summarize_results.py --json`` output into a frozen
:class:`PrVerdict`; ``comment_body`` writes the one pull-request comment (headed by a hidden
marker that names the verdict and a digest of what it says); ``decide`` picks create, update or
stay silent from the verdict and the comments already there.  Talking to GitHub is
``github_rest``; the command line is ``pr_verdict_command_line``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from dataclasses import dataclass

from fi_attn_bench.summarizer.markdown_text import clip, escape_markdown
from fi_attn_bench.wording import counted

MARKER_PREFIX = "<!-- fi-attn-pr-verdict"
MARKER = re.compile(r"\A<!-- fi-attn-pr-verdict name=([A-Za-z0-9._/-]+) digest=([0-9a-f]{16}) -->")
NAME_PATTERN = re.compile(r"[A-Za-z0-9._/-]{1,64}")
MAX_COMMENT_CHARS = 60_000  # GitHub refuses a comment body over 65,536 characters
MAX_CASE_CHARS = 300  # a case label longer than this is cut in the comment
DEFAULT_ROWS = 20
ALERT_STATES = ("regression", "candidate failed", "both failed", "recovered")
EXIT_CODES = (0, 1, 2)
REPORT_KEYS = ("verdict", "reason", "exit_code", "matched", "missing", "gate")


class VerdictError(ValueError):
    """The JSON is not a regression report of summarize_results.py."""


class Action(enum.Enum):
    """What the command does with the pull request's comment."""

    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"  # the comment there already says this
    SILENT = "silent"  # nothing to report and no comment to correct


@dataclass(frozen=True)
class ChangedCase:
    """One matched case worth a line in the comment."""

    api: str
    case: str
    state: str  # regression, improvement, candidate failed, both failed, recovered
    delta_pct: float  # candidate time vs baseline, in %; NaN where a side failed
    baseline_ms: float
    candidate_ms: float


@dataclass(frozen=True)
class PrVerdict:
    """What the regression report says, as much as a pull request needs."""

    verdict: str  # pass, fail, invalid input, not comparable
    exit_code: int
    reason: str
    gate: str  # "5%" or "report only"
    matched: int
    regressions: int
    improvements: int
    failed: int  # cases failed in the candidate (both runs included) and failed new cases
    missing: int
    geomean_speedup: float  # overall, NaN when no case was ok in both runs
    changed: tuple[ChangedCase, ...]  # alerting cases, failures and regressions first
    missing_cases: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def alert(self) -> bool:
        """Whether the pull request must hear about this run."""
        return self.exit_code != 0 or self.improvements > 0 or bool(self.changed)


@dataclass(frozen=True)
class Comment:
    """A comment already on the pull request."""

    id: int
    body: str
    author: str
    created_at: str


@dataclass(frozen=True)
class Decision:
    action: Action
    target: Comment | None  # the comment to update (the newest of those carrying the marker)
    duplicates: int  # other comments carrying the marker, left as they are


# ----------------------------------------------------------------------------- reading


def read_verdict(text: str) -> PrVerdict:
    """The verdict of a regression report's JSON text; VerdictError when it is not one."""
    try:
        report = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise VerdictError(f"not JSON: {exc}") from None
    if not isinstance(report, dict) or any(key not in report for key in REPORT_KEYS):
        raise VerdictError(
            "not a regression report of summarize_results.py --json (it needs "
            + ", ".join(REPORT_KEYS)
            + "; a summary's JSON has no baseline to judge against)"
        )
    exit_code = report["exit_code"]
    if exit_code not in EXIT_CODES or isinstance(exit_code, bool):
        raise VerdictError(f"exit_code {exit_code!r} is none of 0, 1, 2")
    matched = _records(report, "matched")
    states = [str(row.get("state", "")) for row in matched]
    changed = _changed_cases(matched)
    failures = [row for row in _records(report, "failures") if row.get("run") == "candidate"]
    missing = _records(report, "missing")
    return PrVerdict(
        verdict=str(report["verdict"]),
        exit_code=exit_code,
        reason=str(report["reason"]),
        gate=_gate_text(report["gate"]),
        matched=len(matched),
        regressions=states.count("regression"),
        improvements=sum(case.state == "improvement" for case in changed),
        failed=len(failures),
        missing=len(missing),
        geomean_speedup=_overall_geomean(report.get("aggregates")),
        changed=tuple(changed),
        missing_cases=tuple(_case_text(row) for row in missing),
        warnings=tuple(_warning_text(item) for item in report.get("warnings") or ()),
    )


def _records(report: dict, key: str) -> list[dict]:
    rows = report.get(key) or []
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise VerdictError(f"{key!r} is not a list of rows")
    return rows


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def _changed_cases(matched: list[dict]) -> list[ChangedCase]:
    """Cases that alert: a failing or recovered state, or a significant speedup past the gate;
    failing ones first, then by time change, the largest slowdown first."""
    found = []
    for row in matched:
        state = str(row.get("state", ""))
        delta = _number(row.get("time_ms_delta_pct"))
        if state == "compared" and row.get("changed") is True and delta < 0:
            state = "improvement"
        if state not in (*ALERT_STATES, "improvement"):
            continue
        found.append(
            ChangedCase(
                api=str(row.get("api", "")),
                case=_case_text(row),
                state=state,
                delta_pct=delta,
                baseline_ms=_number(row.get("time_ms_baseline")),
                candidate_ms=_number(row.get("time_ms_candidate")),
            )
        )
    failing = ("regression", "candidate failed", "both failed")
    return sorted(
        found,
        key=lambda case: (case.state not in failing, -_finite_or(case.delta_pct, math.inf)),
    )


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


def _case_text(row: dict) -> str:
    return str(row.get("case_label") or row.get("case") or "")


def _gate_text(gate) -> str:
    threshold = gate.get("threshold_pct") if isinstance(gate, dict) else None
    return "report only" if threshold is None else f"{_number(threshold):g}%"


def _overall_geomean(aggregates) -> float:
    for item in aggregates or ():
        if isinstance(item, dict) and item.get("scope") == "overall":
            return _number(item.get("geomean_speedup"))
    return math.nan


def _warning_text(item) -> str:
    if isinstance(item, dict):
        return ": ".join(str(item.get(k, "")) for k in ("headline", "detail") if item.get(k))
    return str(item)


# ----------------------------------------------------------------------------- writing


HEADLINE_MARKS = {0: "✅", 1: "❌", 2: "⚠️"}


def inert(text: str, limit: int = MAX_CASE_CHARS) -> str:
    """Text from a CSV, safe in the comment: clipped, Markdown and HTML made inert (so no
    marker either), and no @mention that would notify someone."""
    escaped = escape_markdown(clip(text, limit))
    return escaped.replace("@", "&#64;")


def comment_content(verdict: PrVerdict, name: str, rows: int = DEFAULT_ROWS) -> str:
    """The comment's Markdown without its marker and footer: what the digest covers."""
    mark = HEADLINE_MARKS[verdict.exit_code]
    lines = [
        f"### {mark} {inert(name)}: {verdict.verdict.upper()}",
        "",
        inert(verdict.reason, 1000),
        "",
        "| matched | regressions | improvements | failed | missing | geomean speedup | gate |",
        "|---:|---:|---:|---:|---:|---:|---|",
        f"| {verdict.matched} | {verdict.regressions} | {verdict.improvements} "
        f"| {verdict.failed} | {verdict.missing} | {_speedup_text(verdict.geomean_speedup)} "
        f"| {verdict.gate} |",
    ]
    for warning in verdict.warnings:
        lines += ["", f"> **Warning:** {inert(warning, 1000)}"]
    lines += _changed_table(verdict.changed, rows)
    lines += _missing_list(verdict.missing_cases, rows)
    text = "\n".join(lines) + "\n"
    if len(text) > MAX_COMMENT_CHARS:  # only many very long warnings get here
        text = text[:MAX_COMMENT_CHARS] + "\n\n*Cut to fit a comment: the report has it all.*\n"
    return text


def _speedup_text(value: float) -> str:
    return f"×{value:.3f}" if math.isfinite(value) else "–"


def _changed_table(changed: tuple[ChangedCase, ...], rows: int) -> list[str]:
    if not changed:
        return []
    lines = [
        "",
        f"<details{' open' if changed[0].state != 'improvement' else ''}>"
        f"<summary>{counted(len(changed), 'changed case')}</summary>",
        "",
        "| state | API | case | time change | baseline ms | candidate ms |",
        "|---|---|---|---:|---:|---:|",
    ]
    for case in changed[:rows]:
        lines.append(
            f"| {case.state} | {inert(case.api)} | {inert(case.case)} "
            f"| {_delta_text(case.delta_pct)} | {_ms_text(case.baseline_ms)} "
            f"| {_ms_text(case.candidate_ms)} |"
        )
    if len(changed) > rows:
        lines += ["", f"*and {len(changed) - rows} more: the job's report lists them all.*"]
    return [*lines, "", "</details>"]


def _missing_list(missing: tuple[str, ...], rows: int) -> list[str]:
    if not missing:
        return []
    lines = ["", f"**{counted(len(missing), 'baseline case')} missing from this run:**", ""]
    lines += [f"- {inert(case)}" for case in missing[:rows]]
    if len(missing) > rows:
        lines.append(f"- and {len(missing) - rows} more")
    return lines


def _delta_text(value: float) -> str:
    if math.isnan(value):
        return "–"
    return f"{value:+.1f} %" if math.isfinite(value) else ("+∞ %" if value > 0 else "−∞ %")


def _ms_text(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "–"


def digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def comment_body(content: str, name: str, footer: str = "") -> str:
    """The whole comment: the marker (name and digest of ``content``), content, footer."""
    marker = f"{MARKER_PREFIX} name={name} digest={digest(content)} -->"
    tail = f"\n<sub>{footer}</sub>\n" if footer else ""
    return f"{marker}\n{content}{tail}"


# ----------------------------------------------------------------------------- deciding


def marked(comments, name: str, author: str | None) -> list[Comment]:
    """The comments that are this verdict's: the marker first, with ``name``, by ``author``
    (None: by anyone), oldest first."""
    found = []
    for comment in comments:
        match = MARKER.match(comment.body)
        if match and match.group(1) == name and (author is None or comment.author == author):
            found.append(comment)
    return sorted(found, key=lambda comment: (comment.created_at, comment.id))


def decide(verdict: PrVerdict, content: str, mine: list[Comment], always: bool) -> Decision:
    """Create or update when the run alerts (or ``always``); otherwise update only a comment
    whose content would change (a fixed regression), else stay silent."""
    target = mine[-1] if mine else None
    duplicates = max(len(mine) - 1, 0)
    if target is None:
        action = Action.CREATE if verdict.alert or always else Action.SILENT
        return Decision(action, None, 0)
    match = MARKER.match(target.body)
    same = match is not None and match.group(2) == digest(content)
    if verdict.alert or always or not same:
        return Decision(Action.UPDATE, target, duplicates)
    return Decision(Action.UNCHANGED, target, duplicates)


def status_state(exit_code: int) -> str:
    """The commit status of a verdict: success, failure, or error for bad input."""
    return {0: "success", 1: "failure"}.get(exit_code, "error")
