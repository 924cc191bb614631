"""fi-attn-pr-verdict: the regression report's verdict on a pull request.

Run after ``summarize_results.py --baseline ... --json regression.json`` in a GitHub Actions job.
It writes the verdict to the job summary, keeps one pull-request comment up to date (found by a
hidden marker; posted only when the run alerts or the comment there would change, unless
--always) and sets a commit status a branch rule can require.  Without a token it prints what it
would post.

Exit codes: 0 pass; 1 the report failed (regression, failed or missing case); 2 bad input (the
report's own exit 2, an unreadable or invalid JSON, a missing setting, a bug); 3 GitHub refused or
could not be reached (HTTP 4xx/5xx, rate limit, network); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.summarizer.github_rest import CommitStatus, GitHub, GitHubError
from fi_attn_bench.summarizer.output import OutputTarget, overwrite_error
from fi_attn_bench.summarizer.pr_verdict import (
    DEFAULT_ROWS,
    NAME_PATTERN,
    Action,
    PrVerdict,
    VerdictError,
    comment_body,
    comment_content,
    decide,
    marked,
    read_verdict,
    status_state,
)

EXIT_INPUT_ERROR = 2
EXIT_GITHUB_ERROR = 3
EXIT_INTERRUPTED = 130
DEFAULT_NAME = "attention-bench"
DEFAULT_AUTHOR = "github-actions[bot]"  # who writes comments with the job's GITHUB_TOKEN
DEFAULT_API_URL = "https://api.github.com"
MAX_REPORT_BYTES = 1 << 30
REPO_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
SHA_PATTERN = re.compile(r"[0-9a-fA-F]{7,64}")


class SettingError(ValueError):
    """A setting the command needs is missing or malformed (exit 2)."""


@dataclass(frozen=True)
class Target:
    """Where the verdict goes on GitHub."""

    api_url: str
    token: str
    repo: str
    pull_request: int | None
    sha: str
    run_url: str


@dataclass(frozen=True)
class VerdictRequest:
    report: Path
    name: str
    always: bool
    rows: int
    author: str
    comment: bool
    status: bool
    summary: Path | None
    dry_run: bool
    repo: str | None = None  # None: the job's environment says
    pull_request: int | None = None
    sha: str | None = None


def name_type(text: str) -> str:
    if not NAME_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError("use 1-64 of A-Z a-z 0-9 . _ / -")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fi-attn-pr-verdict", description=__doc__.split("\n")[0].split(": ", 1)[1]
    )
    parser.add_argument("report", type=Path, help="summarize_results.py's regression --json file")
    parser.add_argument(
        "--name",
        type=name_type,
        default=DEFAULT_NAME,
        help="Names this verdict: its comment's marker and its commit status context "
        f"fi-attn-bench/NAME (default {DEFAULT_NAME}; one per job of a matrix).",
    )
    parser.add_argument(
        "--always",
        action="store_true",
        help="Post or update the comment even when nothing changed and nothing alerts.",
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_ROWS,
        metavar="N",
        help=f"Changed and missing cases listed in the comment (default {DEFAULT_ROWS}).",
    )
    parser.add_argument("--repo", help="OWNER/NAME (default $GITHUB_REPOSITORY).")
    parser.add_argument(
        "--pr", type=int, help="Pull request number (default: the event's, $GITHUB_EVENT_PATH)."
    )
    parser.add_argument(
        "--sha", help="Commit of the status (default: the pull request's head, else $GITHUB_SHA)."
    )
    parser.add_argument(
        "--author",
        default=DEFAULT_AUTHOR,
        metavar="LOGIN",
        help="Only this account's comments are this verdict's (default "
        f"{DEFAULT_AUTHOR}, the job token's; a personal token: its login).",
    )
    parser.add_argument("--no-comment", action="store_true", help="Set no comment.")
    parser.add_argument("--no-status", action="store_true", help="Set no commit status.")
    parser.add_argument(
        "--summary",
        type=Path,
        metavar="PATH",
        help="Append the verdict here (default $GITHUB_STEP_SUMMARY; none when unset).",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Print what would be posted, as without a token, and call nothing.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def parse_request(argv=None) -> VerdictRequest:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_rows < 1:
        parser.error("--max-rows must be at least 1")
    summary = args.summary or (Path(p) if (p := os.environ.get("GITHUB_STEP_SUMMARY")) else None)
    return VerdictRequest(
        report=args.report,
        name=args.name,
        always=args.always,
        rows=args.max_rows,
        author=args.author,
        comment=not args.no_comment,
        status=not args.no_status,
        summary=summary,
        dry_run=args.dry_run,
        repo=args.repo,
        pull_request=args.pr,
        sha=args.sha,
    )


def main(argv=None) -> int:
    request = parse_request(argv)
    try:
        return _run(request)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (SettingError, VerdictError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except GitHubError as exc:
        print(f"error: GitHub API: {exc}", file=sys.stderr)
        return EXIT_GITHUB_ERROR
    except Exception as exc:  # a bug or memory exhausted: one line; PR_VERDICT_DEBUG=1 re-raises
        if os.environ.get("PR_VERDICT_DEBUG"):
            raise
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR


def _run(request: VerdictRequest) -> int:
    verdict = read_verdict(_report_text(request.report))
    content = comment_content(verdict, request.name, request.rows)
    _append_summary(request, content)
    print(f"Verdict: {verdict.verdict.upper()} — {verdict.reason}", flush=True)
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or ""
    if request.dry_run or not token:
        _print_would_post(request, verdict, content, "--dry-run" if token else "no token")
        return verdict.exit_code
    target = _target(token, request)
    client = GitHub(target.api_url, target.token)
    if request.comment:
        _keep_comment(client, target, request, verdict, content)
    if request.status:
        status = _status(verdict, request.name, target.run_url)
        client.set_status(target.repo, target.sha, status)
        print(f"Commit status {status.context}: {status.state} on {target.sha[:12]}")
    return verdict.exit_code


def _report_text(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise SettingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise SettingError(f"{path}: over {MAX_REPORT_BYTES} bytes, not a report")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _append_summary(request: VerdictRequest, content: str) -> None:
    """The verdict into the job summary (appended: the file is the job's, shared by steps)."""
    if request.summary is None:
        return
    why = overwrite_error([OutputTarget(request.summary, "job summary")], [request.report])
    if why:
        raise SettingError(why)
    try:
        with open(request.summary, "a", encoding="utf-8") as handle:
            handle.write(content + "\n")
    except OSError as exc:
        raise SettingError(
            f"cannot write the job summary to {request.summary}: {exc.strerror or exc}"
        ) from None


def _print_would_post(request, verdict: PrVerdict, content: str, why: str) -> None:
    status = _status(verdict, request.name, "")
    print(f"{why}: nothing posted. The comment would be (when it alerts or changes):")
    print(comment_body(content, request.name))
    print(f"The commit status would be {status.context}: {status.state} ({status.description})")


def _keep_comment(client: GitHub, target: Target, request, verdict, content) -> None:
    footer = _footer(target)
    body = comment_body(content, request.name, footer)
    mine = marked(client.comments(target.repo, target.pull_request), request.name, request.author)
    decision = decide(verdict, content, mine, request.always)
    if decision.duplicates:
        kept = "updated" if decision.action is Action.UPDATE else "kept as it is"
        print(
            f"note: {decision.duplicates + 1} comments carry this verdict's marker; "
            f"the newest ({decision.target.id}) is {kept}, the others left as they are"
        )
    if decision.action is Action.CREATE:
        made = client.create_comment(target.repo, target.pull_request, body)
        print(f"Comment {made.id} created on pull request #{target.pull_request}")
    elif decision.action is Action.UPDATE:
        client.update_comment(target.repo, decision.target.id, body)
        print(f"Comment {decision.target.id} updated on pull request #{target.pull_request}")
    elif decision.action is Action.UNCHANGED:
        print(f"Comment {decision.target.id} already says this: not updated")
    else:
        print("Nothing to report and no earlier comment: no comment posted")


def _footer(target: Target) -> str:
    run = f" · [the run]({target.run_url})" if target.run_url else ""
    return f"fi-attn-pr-verdict on {target.sha[:12]}{run}"


def _status(verdict: PrVerdict, name: str, run_url: str) -> CommitStatus:
    description = f"{verdict.verdict.upper()}: {verdict.reason}"
    return CommitStatus(
        status_state(verdict.exit_code), f"fi-attn-bench/{name}", description, run_url
    )


def _target(token: str, request: VerdictRequest) -> Target:
    """The repository, pull request and commit from the options, else the job's environment."""
    environ = os.environ
    repo, pull_request, sha = request.repo, request.pull_request, request.sha
    event = _event(environ.get("GITHUB_EVENT_PATH"))
    pr_event = event.get("pull_request") if isinstance(event.get("pull_request"), dict) else {}
    repo = repo or environ.get("GITHUB_REPOSITORY", "")
    if not REPO_PATTERN.fullmatch(repo):
        raise SettingError(f"no repository OWNER/NAME ({repo!r}): set GITHUB_REPOSITORY or --repo")
    if pull_request is None and isinstance(pr_event.get("number"), int):
        pull_request = pr_event["number"]
    if request.comment and (pull_request is None or pull_request < 1):
        raise SettingError(
            "no pull request number: run on a pull_request event (GITHUB_EVENT_PATH) or pass "
            "--pr (or --no-comment)"
        )
    head = pr_event.get("head") if isinstance(pr_event.get("head"), dict) else {}
    sha = sha or head.get("sha") or environ.get("GITHUB_SHA", "")
    if not SHA_PATTERN.fullmatch(str(sha)):
        raise SettingError(f"no commit SHA ({sha!r}): set GITHUB_SHA or --sha")
    server, run_id = environ.get("GITHUB_SERVER_URL"), environ.get("GITHUB_RUN_ID")
    run_url = f"{server}/{repo}/actions/runs/{run_id}" if server and run_id else ""
    api_url = environ.get("GITHUB_API_URL") or DEFAULT_API_URL
    if not api_url.startswith(("https://", "http://")):
        raise SettingError(f"GITHUB_API_URL {api_url!r} is not an http(s) address")
    return Target(api_url, token, repo, pull_request, str(sha), run_url)


def _event(path: str | None) -> dict:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SettingError(f"cannot read the event GITHUB_EVENT_PATH={path}: {exc}") from None
    return event if isinstance(event, dict) else {}


def run_as_program() -> int:
    """The ``fi-attn-pr-verdict`` console script."""
    return main()
