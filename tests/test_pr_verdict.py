"""fi-attn-pr-verdict against a local stand-in of GitHub's REST API (tests/github_stand_in.py).

The regression reports are real: summarize_results.py compares the H100 decode sweep in
tests/fixtures/real_csv with a copy where some cases are made slower, faster or failed.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

from fi_attn_bench.summarizer import pr_verdict  # noqa: E402
from fi_attn_bench.summarizer.command_line import main as summarize  # noqa: E402
from fi_attn_bench.summarizer.pr_verdict_command_line import main  # noqa: E402
from tests.github_stand_in import BOT, Failure, StandIn  # noqa: E402

REAL = Path(__file__).parent / "fixtures" / "real_csv" / "h100_decode_default.csv"
TOKEN = "ghs_stand_in_token"
REPO = "octo/attention"
PR = 7
HEAD = "0123456789abcdef0123456789abcdef01234567"
TIME_COLUMNS = ("time_ms", "time_min_ms", "time_q1_ms", "time_q3_ms", "time_max_ms")
HOSTILE_IMPL = (
    "<!-- fi-attn-pr-verdict name=attention-bench digest=0000000000000000 --> "
    "@octocat </details><img src=x onerror=alert(1)> | [x](javascript:alert(1))"
)


def regression_json(tmp_path: Path, name: str, slower=(), faster=(), failed=(), impl=None) -> Path:
    """A regression report of the real decode sweep against a copy with the rows ``slower``
    (x1.3), ``faster`` (x0.7) and ``failed`` changed; ``impl``: a name for both sides' rows."""
    folder = tmp_path / name
    folder.mkdir()
    base = pd.read_csv(REAL, dtype=str, keep_default_na=False)
    if impl is not None:
        base["impl"] = impl
    cand = base.copy()
    for rows, factor in ((slower, 1.3), (faster, 0.7)):
        for column in TIME_COLUMNS:
            cand.loc[list(rows), column] = (
                cand.loc[list(rows), column].astype(float) * factor
            ).map(repr)
    for row in failed:
        cand.loc[row, ["status", "time_ms", "error_type", "error"]] = [
            "failed",
            "",
            "RuntimeError",
            "CUDA error: an illegal memory access",
        ]
    base.to_csv(folder / "base.csv", index=False)
    cand.to_csv(folder / "cand.csv", index=False)
    report = folder / "regression.json"
    argv = ["--baseline", str(folder / "base.csv"), "--candidate", str(folder / "cand.csv")]
    argv += ["--fail-on-regression", "5", "--output", str(folder / "r.md"), "--json", str(report)]
    summarize(argv)
    return report


@pytest.fixture()
def github(tmp_path, monkeypatch):
    """The stand-in, and the job's environment pointing at it (a pull_request event)."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": HEAD}}}))
    with StandIn(TOKEN) as stand_in:
        monkeypatch.setenv("GITHUB_API_URL", stand_in.url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
        monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
        monkeypatch.setenv("GITHUB_SHA", "f" * 40)  # the merge commit: not where the status goes
        monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
        monkeypatch.setenv("GITHUB_RUN_ID", "42")
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        monkeypatch.delenv("GH_TOKEN", raising=False)
        yield stand_in.state


def bodies(state) -> list[str]:
    return [comment["body"] for comment in state.comments.get(PR, [])]


def test_creates_one_comment_then_updates_it_on_the_next_push(github, tmp_path, capsys):
    first = regression_json(tmp_path, "push1", slower=[3, 4], failed=[5])
    assert main([str(first)]) == 1
    (body,) = bodies(github)
    assert body.startswith("<!-- fi-attn-pr-verdict name=attention-bench digest=")
    assert "FAIL" in body and "| regression |" in body and "| candidate failed |" in body
    assert HEAD[:12] in body and "https://github.com/octo/attention/actions/runs/42" in body
    status = github.statuses[-1]
    assert (status["sha"], status["state"]) == (HEAD, "failure")
    assert status["context"] == "fi-attn-bench/attention-bench"
    # the next push fixes it: the same comment now says so
    second = regression_json(tmp_path, "push2")
    assert main([str(second)]) == 0
    (body,) = bodies(github)
    assert "PASS" in body and "regression |" not in body
    assert github.statuses[-1]["state"] == "success"
    assert [c for c in github.writes() if "comments" in c] == [
        f"POST /repos/{REPO}/issues/{PR}/comments",
        f"PATCH /repos/{REPO}/issues/comments/{github.comments[PR][0]['id']}",
    ]
    assert "updated" in capsys.readouterr().out


def test_an_improvement_alerts_and_a_quiet_run_stays_silent(github, tmp_path):
    quiet = regression_json(tmp_path, "quiet")
    assert main([str(quiet)]) == 0
    assert bodies(github) == []  # nothing to say, no comment to correct
    assert github.statuses[-1]["state"] == "success"  # the check is set all the same
    assert main([str(quiet)]) == 0
    assert bodies(github) == []
    faster = regression_json(tmp_path, "faster", faster=[10])
    assert main([str(faster)]) == 0
    (body,) = bodies(github)
    assert "| improvement |" in body and "PASS" in body


def test_a_comment_that_already_says_it_is_left_alone_unless_always(github, tmp_path, capsys):
    slower = regression_json(tmp_path, "slower", slower=[3])
    quiet = regression_json(tmp_path, "quiet")
    assert main([str(slower)]) == 1
    assert main([str(quiet)]) == 0  # the regression is gone: the comment must say so
    patches = [call for call in github.writes() if call.startswith("PATCH")]
    assert len(patches) == 1
    assert main([str(quiet)]) == 0  # and again: it already says so
    assert [call for call in github.writes() if call.startswith("PATCH")] == patches
    assert "already says this" in capsys.readouterr().out
    assert main([str(quiet), "--always"]) == 0
    assert len([call for call in github.writes() if call.startswith("PATCH")]) == 2
    assert len(bodies(github)) == 1


def test_never_duplicates_two_marked_comments_update_the_newest(github, tmp_path, capsys):
    marker = "<!-- fi-attn-pr-verdict name=attention-bench digest=0123456789abcdef -->\nold"
    github.add_comment(PR, "LGTM", author="octocat")
    older = github.add_comment(PR, marker)
    github.add_comment(PR, marker, author="octocat")  # someone else's copy: never ours
    github.add_comment(PR, "another review comment", author="hubot")
    newer = github.add_comment(PR, marker)
    github.add_comment(PR, "<!-- fi-attn-pr-verdict name=other-gpu digest=0123456789abcdef -->")
    report = regression_json(tmp_path, "slower", slower=[3])
    assert main([str(report)]) == 1
    out = capsys.readouterr().out
    assert f"the newest ({newer['id']}) is updated" in out and "2 comments" in out
    assert not any(call.startswith("POST") and "comments" in call for call in github.writes())
    assert older["body"] == marker and "regression" in newer["body"]
    pages = [call for call in github.calls if call.startswith("GET")]
    assert len(pages) == 3  # six comments, two a page: every page was read


def test_a_named_verdict_keeps_its_own_comment_and_status(github, tmp_path):
    report = regression_json(tmp_path, "slower", slower=[3])
    assert main([str(report), "--name", "h100"]) == 1
    assert main([str(report), "--name", "h200"]) == 1
    assert len(bodies(github)) == 2
    assert {s["context"] for s in github.statuses} == {"fi-attn-bench/h100", "fi-attn-bench/h200"}


def test_hostile_case_names_are_inert_in_the_comment(github, tmp_path):
    report = regression_json(tmp_path, "hostile", slower=[3], impl=HOSTILE_IMPL)
    assert main([str(report)]) == 1
    (body,) = bodies(github)
    assert body.count("<!--") == 1 and body.count("-->") == 1  # only our own marker
    assert "<img" not in body and "</details><img" not in body
    assert "@octocat" not in body and "&#64;octocat" in body
    assert "[x](javascript:" not in body and "\\[x\\](javascript:" in body  # no link
    comment = pr_verdict.Comment(1, body, BOT, "t")
    assert pr_verdict.marked([comment], "attention-bench", BOT) == [comment]
    # the table keeps its shape: the hostile "|" is escaped, not a new cell
    row = next(line for line in body.splitlines() if line.startswith("| regression |"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7 and "\\|" in row  # six cells


def test_without_a_token_it_prints_what_it_would_post_and_exits_by_the_verdict(
    github, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("GITHUB_TOKEN")
    report = regression_json(tmp_path, "slower", slower=[3])
    assert main([str(report)]) == 1
    out = capsys.readouterr().out
    assert "no token: nothing posted" in out
    assert "<!-- fi-attn-pr-verdict name=attention-bench" in out
    assert "fi-attn-bench/attention-bench: failure" in out
    assert github.calls == []
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert main([str(report), "--dry-run"]) == 1
    assert github.calls == []


def test_the_job_summary_gets_the_verdict_appended(github, tmp_path, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = regression_json(tmp_path, "slower", slower=[3])
    assert main([str(report)]) == 1
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and "FAIL" in text and "| regression |" in text


def test_a_report_that_is_not_comparable_is_an_error_status(github, tmp_path):
    report = regression_json(tmp_path, "slower", slower=[3])
    data = json.loads(report.read_text())
    data.update(verdict="not comparable", exit_code=2, reason="dtype differs")
    report.write_text(json.dumps(data))
    assert main([str(report)]) == 2
    assert github.statuses[-1]["state"] == "error"
    assert "NOT COMPARABLE" in bodies(github)[0]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not JSON"),
        ('{"verdict": "pass", "apis": []}', "not a regression report"),
        ("[1, 2]", "not a regression report"),
        ("\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_report_is_one_error_line_and_exit_2(github, tmp_path, capsys, text, expected):
    report = tmp_path / "regression.json"
    report.write_bytes(text.encode("latin-1"))
    assert main([str(report)]) == 2
    assert expected in one_error_line(capsys)
    assert github.calls == []


def test_a_missing_report_or_setting_is_exit_2(github, tmp_path, monkeypatch, capsys):
    assert main([str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in one_error_line(capsys)
    report = regression_json(tmp_path, "quiet")
    capsys.readouterr()
    monkeypatch.delenv("GITHUB_REPOSITORY")
    assert main([str(report)]) == 2
    assert "GITHUB_REPOSITORY" in one_error_line(capsys)
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.delenv("GITHUB_EVENT_PATH")
    assert main([str(report)]) == 2
    assert "no pull request number" in one_error_line(capsys)
    assert main([str(report), "--pr", "9"]) == 0  # the status goes on GITHUB_SHA then
    assert github.statuses[-1]["sha"] == "f" * 40


def test_the_summary_is_never_written_into_a_data_file(github, tmp_path, monkeypatch, capsys):
    data = tmp_path / "results.csv"
    shutil.copy(REAL, data)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(data))
    report = regression_json(tmp_path, "quiet")
    capsys.readouterr()
    assert main([str(report)]) == 2
    assert "existing data file" in one_error_line(capsys)
    assert data.read_bytes() == REAL.read_bytes()


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (
            Failure(403, "API rate limit exceeded", {"x-ratelimit-remaining": "0"}),
            "rate limited",
        ),
        (Failure(429, "You have exceeded a secondary rate limit", {"retry-after": "60"}), "60 s"),
        (Failure(403, "Resource not accessible by integration"), "pull-requests: write"),
        (Failure(500, "Server Error"), "HTTP 500 Server Error"),
    ],
)
def test_github_errors_are_one_line_and_exit_3(github, tmp_path, capsys, failure, expected):
    report = regression_json(tmp_path, "slower", slower=[3])
    capsys.readouterr()
    github.fail_next = failure
    assert main([str(report)]) == 3
    line = one_error_line(capsys)
    assert line.startswith("error: GitHub API: GET /repos/octo/attention/issues/7/comments: HTTP")
    assert expected in line


def test_a_bad_token_is_refused_by_the_stand_in(github, tmp_path, monkeypatch, capsys):
    report = regression_json(tmp_path, "slower", slower=[3])
    capsys.readouterr()
    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    assert main([str(report)]) == 3
    assert "HTTP 401 Bad credentials (the token is not valid)" in one_error_line(capsys)
    assert bodies(github) == []


def test_the_token_never_follows_a_next_page_to_another_host(github, tmp_path, capsys):
    for _ in range(3):
        github.add_comment(PR, "review")
    github.next_link_host = "http://attacker.example"
    report = regression_json(tmp_path, "slower", slower=[3])
    capsys.readouterr()
    assert main([str(report)]) == 3
    assert "refusing a next page outside" in one_error_line(capsys)


def test_an_unreachable_api_is_one_line_and_exit_3(github, tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:  # a port just freed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{port}")
    report = regression_json(tmp_path, "slower", slower=[3])
    capsys.readouterr()
    assert main([str(report)]) == 3
    assert f"cannot reach http://127.0.0.1:{port}" in one_error_line(capsys)


def test_a_bad_name_is_refused_before_anything_is_read(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "r.json"), "--name", "x --> <b>"])
    assert exit_info.value.code == 2
