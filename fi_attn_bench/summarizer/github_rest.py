"""The few GitHub REST calls the pull-request verdict makes, through urllib and the job's token.

Issue comments (list, paginated by the ``Link`` header; create; update) and commit statuses.
``GITHUB_API_URL`` (GitHub Enterprise Server) is honoured by the caller passing it; the token
is only ever sent to that address (a ``next`` page elsewhere is refused).  Every failure is a
:class:`GitHubError` whose text is one line.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from fi_attn_bench.summarizer.pr_verdict import Comment

API_VERSION = "2022-11-28"
TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 32 << 20  # a page of 100 comments of 65,536 characters, with room
MAX_PAGES = 200  # 20,000 comments: past this a pull request is not one we can read
PER_PAGE = 100
MAX_MESSAGE_CHARS = 200
STATUS_DESCRIPTION_CHARS = 140  # GitHub's limit for a commit status description


class GitHubError(Exception):
    """A call failed: HTTP status (0 without a response) and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Response:
    data: object
    next_url: str | None


class GitHub:
    """A client for one API address and token (``opener``: a test's urllib opener)."""

    def __init__(self, api_url: str, token: str, opener=None, timeout: float = TIMEOUT_S):
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._opener = opener or urllib.request.build_opener(_NoRedirect)
        self._timeout = timeout

    # --------------------------------------------------------------- the calls we use

    def comments(self, repo: str, number: int) -> list[Comment]:
        """Every comment of an issue or pull request, oldest first (all pages)."""
        url = f"{self.api_url}/repos/{repo}/issues/{number}/comments?per_page={PER_PAGE}"
        found = []
        for _ in range(MAX_PAGES):
            response = self._call("GET", url)
            if not isinstance(response.data, list):
                raise GitHubError(0, f"GET {_path(url)}: the answer is not a list of comments")
            found += [_comment(item) for item in response.data if isinstance(item, dict)]
            if response.next_url is None:
                return found
            url = self._own(response.next_url)
        raise GitHubError(0, f"GET {_path(url)}: more than {MAX_PAGES} pages of comments")

    def create_comment(self, repo: str, number: int, body: str) -> Comment:
        url = f"{self.api_url}/repos/{repo}/issues/{number}/comments"
        return _comment(self._call("POST", url, {"body": body}).data)

    def update_comment(self, repo: str, comment_id: int, body: str) -> Comment:
        url = f"{self.api_url}/repos/{repo}/issues/comments/{comment_id}"
        return _comment(self._call("PATCH", url, {"body": body}).data)

    def set_status(self, repo: str, sha: str, status: CommitStatus) -> None:
        """A commit status (a check a branch rule can require, by its context)."""
        payload = {
            "state": status.state,
            "context": status.context,
            "description": status.description[:STATUS_DESCRIPTION_CHARS],
        }
        if status.target_url:
            payload["target_url"] = status.target_url
        self._call("POST", f"{self.api_url}/repos/{repo}/statuses/{sha}", payload)

    # --------------------------------------------------------------- plumbing

    def _own(self, url: str) -> str:
        """A ``next`` page's address, which must be on our API (the token goes with it)."""
        if not url.startswith(self.api_url + "/"):
            raise GitHubError(0, f"refusing a next page outside {self.api_url}: {url[:100]}")
        return url

    def _call(self, method: str, url: str, payload: dict | None = None) -> Response:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("X-GitHub-Api-Version", API_VERSION)
        request.add_header("User-Agent", "fi-attn-pr-verdict")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        where = f"{method} {_path(url)}"
        try:
            with self._opener.open(request, timeout=self._timeout) as answer:
                raw = answer.read(MAX_RESPONSE_BYTES + 1)
                link = answer.headers.get("Link", "")
        except urllib.error.HTTPError as error:
            raise GitHubError(error.code, f"{where}: {_http_reason(error)}") from None
        except OSError as error:  # URLError and timeouts are OSErrors
            reason = getattr(error, "reason", error)
            raise GitHubError(0, f"{where}: cannot reach {self.api_url}: {reason}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise GitHubError(0, f"{where}: the answer is over {MAX_RESPONSE_BYTES} bytes")
        try:
            parsed = json.loads(raw) if raw.strip() else None
        except ValueError:
            raise GitHubError(0, f"{where}: the answer is not JSON") from None
        return Response(parsed, _next_link(link))


@dataclass(frozen=True)
class CommitStatus:
    state: str  # success, failure, error, pending
    context: str
    description: str
    target_url: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the token to another address: taken as the error it is."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _comment(item) -> Comment:
    if not isinstance(item, dict) or not isinstance(item.get("id"), int):
        raise GitHubError(0, "a comment in GitHub's answer has no id")
    user = item.get("user") if isinstance(item.get("user"), dict) else {}
    return Comment(
        id=item["id"],
        body=str(item.get("body") or ""),
        author=str(user.get("login", "")),
        created_at=str(item.get("created_at", "")),
    )


def _path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.path


def _next_link(header: str) -> str | None:
    """The ``rel="next"`` address of a Link header (RFC 8288), if any."""
    for part in header.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") and target.strip().startswith("<"):
            return target.strip()[1:-1]
    return None


def _http_reason(error: urllib.error.HTTPError) -> str:
    """One line: the status, GitHub's message, and what a rate limit or a missing
    permission means for the job."""
    try:
        body = json.loads(error.read(64 << 10) or b"{}")
        message = str(body.get("message", "")) if isinstance(body, dict) else ""
    except (ValueError, OSError):
        message = ""
    message = " ".join(message.split())[:MAX_MESSAGE_CHARS]
    headers = error.headers or {}
    text = f"HTTP {error.code}" + (f" {message}" if message else "")
    limited = headers.get("x-ratelimit-remaining") == "0" or "rate limit" in message.lower()
    if error.code in (403, 429) and limited:
        return text + f" (rate limited{_reset_text(headers)}; rerun the job later)"
    if error.code in (401,):
        return text + " (the token is not valid)"
    if error.code in (403, 404):
        return text + (
            " (the job's token needs permissions pull-requests: write and statuses: write; "
            "a pull request from a fork gets a read-only token)"
        )
    return text


def _reset_text(headers) -> str:
    reset = headers.get("x-ratelimit-reset")
    if reset and str(reset).isdigit():
        return " until " + time.strftime("%H:%M:%S UTC", time.gmtime(int(reset)))
    retry = headers.get("retry-after")
    return f" for {retry} s" if retry else ""
