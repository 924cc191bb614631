"""A local stand-in of the GitHub REST endpoints fi-attn-pr-verdict calls, on 127.0.0.1.

Issue comments (list with ``Link`` pagination, create, update) and commit statuses, behind a
bearer-token check, as GitHub documents them (docs.github.com/rest/issues/comments and
/rest/commits/statuses). ``fail_next`` makes the next call answer an error (a rate limit, a 500).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BOT = "github-actions[bot]"
STATUS_STATES = ("error", "failure", "pending", "success")


@dataclass
class Failure:
    status: int
    message: str
    headers: dict = field(default_factory=dict)


@dataclass
class GitHubState:
    token: str
    page_size: int = 2  # GitHub's pages hold up to 100; small pages make the client paginate
    comments: dict = field(default_factory=dict)  # issue number -> list of comment dicts
    statuses: list = field(default_factory=list)
    calls: list = field(default_factory=list)  # "METHOD /path"
    fail_next: Failure | None = None
    next_link_host: str | None = None  # answer a next page on another host
    _ids: int = 1000
    _clock: int = 0

    def add_comment(self, number: int, body: str, author: str = BOT) -> dict:
        self._ids += 1
        self._clock += 1
        comment = {
            "id": self._ids,
            "body": body,
            "user": {"login": author, "type": "Bot" if author.endswith("[bot]") else "User"},
            "created_at": f"2026-12-07T10:{self._clock // 60:02d}:{self._clock % 60:02d}Z",
        }
        self.comments.setdefault(number, []).append(comment)
        return comment

    def writes(self) -> list[str]:
        return [call for call in self.calls if not call.startswith("GET ")]


class _Handler(BaseHTTPRequestHandler):
    state: GitHubState  # set per server

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PATCH(self):
        self._serve("PATCH")

    def _serve(self, method: str):
        state = self.server.state
        parts = urlsplit(self.path)
        state.calls.append(f"{method} {parts.path}")
        if self.headers.get("Authorization") != f"Bearer {state.token}":
            return self._answer(401, {"message": "Bad credentials"})
        if state.fail_next is not None:
            failure, state.fail_next = state.fail_next, None
            return self._answer(failure.status, {"message": failure.message}, failure.headers)
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        route = _route(method, parts.path)
        if route is None:
            return self._answer(404, {"message": "Not Found"})
        name, groups = route
        getattr(self, f"_{name}")(state, groups, payload, parse_qs(parts.query))

    def _list_comments(self, state, groups, payload, query):
        comments = state.comments.get(int(groups[2]), [])
        size = min(int(query.get("per_page", ["30"])[0]), state.page_size)
        page = int(query.get("page", ["1"])[0])
        headers = {}
        if page * size < len(comments):
            host = state.next_link_host or f"http://127.0.0.1:{self.server.server_port}"
            path = f"/repos/{groups[0]}/{groups[1]}/issues/{groups[2]}/comments"
            headers["Link"] = f'<{host}{path}?per_page={size}&page={page + 1}>; rel="next"'
        self._answer(200, comments[(page - 1) * size : page * size], headers)

    def _create_comment(self, state, groups, payload, query):
        if not isinstance(payload, dict) or not isinstance(payload.get("body"), str):
            return self._answer(422, {"message": "Invalid request: body is required"})
        if len(payload["body"]) > 65536:
            return self._answer(422, {"message": "Body is too long (maximum is 65536)"})
        self._answer(201, state.add_comment(int(groups[2]), payload["body"]))

    def _update_comment(self, state, groups, payload, query):
        for comment in (c for cs in state.comments.values() for c in cs):
            if comment["id"] == int(groups[2]):
                comment["body"] = payload["body"]
                return self._answer(200, comment)
        self._answer(404, {"message": "Not Found"})

    def _set_status(self, state, groups, payload, query):
        if payload.get("state") not in STATUS_STATES or len(payload.get("description", "")) > 140:
            return self._answer(422, {"message": "Validation Failed"})
        state.statuses.append({"sha": groups[2], **payload})
        self._answer(201, {"id": len(state.statuses), **payload})

    def _answer(self, status: int, data, headers: dict | None = None):
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)


ROUTES = (
    ("GET", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", "list_comments"),
    ("POST", r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", "create_comment"),
    ("PATCH", r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)", "update_comment"),
    ("POST", r"/repos/([^/]+)/([^/]+)/statuses/([0-9a-f]+)", "set_status"),
)


def _route(method: str, path: str):
    for want, pattern, name in ROUTES:
        match = re.fullmatch(pattern, path)
        if want == method and match:
            return name, match.groups()
    return None


class StandIn:
    """The server in a thread: ``url`` for GITHUB_API_URL, ``state`` to seed and inspect."""

    def __init__(self, token: str):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.state = GitHubState(token)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def state(self) -> GitHubState:
        return self.server.state

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
