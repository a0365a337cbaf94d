"""The few GitHub REST calls the CI scripts make, over an injectable transport (stdlib only).

Shared by verdict.py (status, labels, acceptance) and pr_comment.py (the sticky comment).
Transient failures (a network error, HTTP 429 or 5xx) are retried with backoff, because a
required status that was never set because of one 502 leaves a pull request stuck; any other
answer outside 2xx raises `ApiError` with its HTTP status, so callers can tell a 403 from a 404.

Deliberately not here: deciding anything from the answers.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

SHA = re.compile(r"[0-9a-f]{40}")
REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")
# Retried: rate limits and server errors. 0 is a network error (no answer at all).
RETRIED = frozenset({0, 429, 500, 502, 503, 504})

Transport = Callable[[str, str, bytes | None, Mapping[str, str]], tuple[int, Any]]


class ApiError(Exception):
    """A REST call failed; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def urllib_transport(
    method: str, url: str, body: bytes | None, headers: Mapping[str, str]
) -> tuple[int, Any]:
    """Send one request; returns (status, parsed JSON or None); status 0 for no answer."""
    if not url.startswith("https://"):
        raise ApiError(f"refusing a non-https API URL: {url}")
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode("utf-8")
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError):
        return 0, None


class GitHub:
    """REST calls on one repository, with retries on transient failures."""

    def __init__(
        self,
        api_url: str,
        repo: str,
        token: str,
        transport: Transport,
        *,
        attempts: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if REPOSITORY.fullmatch(repo) is None:
            raise ApiError(f"GITHUB_REPOSITORY {repo!r} is not owner/name")
        self.repo = repo
        self._base = f"{api_url.rstrip('/')}/repos/{repo}"
        self._headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "phasebench-ci",
        }
        self._transport = transport
        self._attempts = attempts
        self._sleep = sleep

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        status = 0
        for attempt in range(1, self._attempts + 1):
            status, data = self._transport(method, f"{self._base}{path}", body, headers)
            if 200 <= status < 300:
                return data
            if status not in RETRIED or attempt == self._attempts:
                break
            self._sleep(2.0**attempt)  # 2, 4, 8 s: inside any job's timeout
        answer = "no answer (network)" if status == 0 else f"HTTP {status}"
        raise ApiError(f"{method} {path.split('?', maxsplit=1)[0]} answered {answer}", status)

    def _pages(self, path: str, max_pages: int = 20) -> list[Any]:
        found: list[Any] = []
        sep = "&" if "?" in path else "?"
        for page in range(1, max_pages + 1):
            batch = self._call("GET", f"{path}{sep}per_page=100&page={page}")
            if isinstance(batch, dict):  # listings wrapped in an object (workflow runs)
                batch = next((v for v in batch.values() if isinstance(v, list)), None)
            if not isinstance(batch, list):
                raise ApiError(f"GET {path} is not a list")
            found.extend(batch)
            if len(batch) < 100:
                break
        return found

    def pull(self, number: int) -> Any:
        """GET /pulls/{number}."""
        return self._call("GET", f"/pulls/{number}")

    def comments(self, number: int) -> list[Any]:
        """Every comment on the PR's conversation, oldest first."""
        return self._pages(f"/issues/{number}/comments")

    def issue_events(self, number: int) -> list[Any]:
        """The PR's issue events (labeled, unlabeled, ...), oldest first."""
        return self._pages(f"/issues/{number}/events")

    def permission(self, login: str) -> Any:
        """GET /collaborators/{login}/permission (`permission`: admin, write, read, none)."""
        return self._call("GET", f"/collaborators/{urllib.parse.quote(login)}/permission")

    def runs_for(self, sha: str, event: str) -> list[Any]:
        """The workflow runs of any workflow of this repository for `sha` and `event`."""
        return self._pages(f"/actions/runs?head_sha={sha}&event={event}", max_pages=5)

    def statuses(self, sha: str) -> list[Any]:
        """The commit statuses of `sha`, newest first (first page: the newest 100)."""
        listing = self._call("GET", f"/commits/{sha}/statuses?per_page=100")
        if not isinstance(listing, list):
            raise ApiError(f"GET /commits/{sha[:12]}/statuses is not a list")
        return listing

    def create(self, number: int, body: str) -> Any:
        """POST a new comment on the PR."""
        return self._call("POST", f"/issues/{number}/comments", {"body": body})

    def update(self, comment_id: int, body: str) -> Any:
        """PATCH an existing comment."""
        return self._call("PATCH", f"/issues/comments/{comment_id}", {"body": body})

    def delete(self, comment_id: int) -> Any:
        """DELETE a comment (a duplicate sticky left by two commenters at once)."""
        return self._call("DELETE", f"/issues/comments/{comment_id}")

    def set_status(self, sha: str, body: Mapping[str, str]) -> Any:
        """POST a commit status (`state`, `context`, `description`, `target_url`) on `sha`."""
        if SHA.fullmatch(sha) is None:
            raise ApiError(f"refusing a commit status on {sha!r}: not 40 lowercase hex")
        return self._call("POST", f"/statuses/{sha}", dict(body))
