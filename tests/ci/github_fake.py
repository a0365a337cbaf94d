"""A fake GitHub REST API for the CI scripts' tests: one repository's statuses, pulls, trees,
workflow runs and jobs, answering as GitHub documents it (pages of at most `per_page`, statuses
newest first, `POST /statuses/{sha}` created by the token's bot), and recording every call.

Deliberately small: only the endpoints .github/scripts/ call. Not a test module (no `test_`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPO = "phasebench/phasebench"
BOT = "github-actions[bot]"
NOW_S = 1_796_000_000.0  # 2026-11-30, the clock of these tests


def stamp(epoch_s: float) -> str:
    """An API timestamp (`created_at`)."""
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(
    state: str, description: str, *, login: str = BOT, at: float = NOW_S, url: str = ""
) -> dict[str, Any]:
    """One entry of `GET /commits/{sha}/statuses`."""
    return {
        "state": state,
        "context": "phasebench/gate",
        "description": description,
        "creator": {"login": login},
        "created_at": stamp(at),
        "target_url": url or None,
    }


class Api:
    """The transport (`method, url, body, headers -> status, data`) of a fake repository."""

    def __init__(self, *, clock: Callable[[], float] = lambda: NOW_S) -> None:
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.trees: dict[str, str] = {}
        self.runs: list[dict[str, Any]] = []
        self.jobs: dict[int, list[dict[str, Any]]] = {}
        self.fail: dict[tuple[str, str], int] = {}  # (method, path pattern) -> HTTP status
        self.calls: list[tuple[str, str, Any]] = []
        self.meanwhile: dict[str, Any] | None = None  # lands just before our next POST
        self.clock = clock
        self._ids = 7000

    # -- what a test reads back ------------------------------------------------------------

    def posted(self) -> list[tuple[str, dict[str, Any]]]:
        """(sha, body) of every status set, in order."""
        return [
            (path.rsplit("/", 1)[1], body)
            for method, path, body in self.calls
            if method == "POST" and path.startswith("/statuses/")
        ]

    def add_status(self, sha: str, entry: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        created = {"id": self._ids, **entry}
        self.statuses.setdefault(sha, []).insert(0, created)
        return created

    # -- the transport ---------------------------------------------------------------------

    def __call__(self, method: str, url: str, body: bytes | None, headers: Any) -> tuple[int, Any]:
        parts = urlsplit(url)
        path = parts.path.split(f"/repos/{REPO}", 1)[1]
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        payload = json.loads(body) if body else None
        self.calls.append((method, path, payload))
        for (m, pattern), code in self.fail.items():
            if m == method and re.fullmatch(pattern, path):
                return code, {"message": "failed on purpose"}
        return self._answer(method, path, query, payload)

    def _page(self, items: list[Any], query: dict[str, str]) -> list[Any]:
        size, page = int(query.get("per_page", 30)), int(query.get("page", 1))
        return items[(page - 1) * size : page * size]

    def _answer(  # noqa: PLR0911 - one return per endpoint
        self, method: str, path: str, query: dict[str, str], payload: Any
    ) -> tuple[int, Any]:
        if method == "GET" and (m := re.fullmatch(r"/commits/(\w+)/statuses", path)):
            return 200, self._page(self.statuses.get(m[1], []), query)
        if method == "POST" and (m := re.fullmatch(r"/statuses/(\w+)", path)):
            if self.meanwhile is not None:
                self.add_status(m[1], self.meanwhile)
                self.meanwhile = None
            entry = {**payload, "creator": {"login": BOT}, "created_at": stamp(self.clock())}
            return 201, self.add_status(m[1], entry)
        if method == "GET" and (m := re.fullmatch(r"/pulls/(\d+)", path)):
            pull = self.pulls.get(int(m[1]))
            return (200, pull) if pull is not None else (404, {"message": "Not Found"})
        if method == "GET" and path == "/pulls":
            return 200, self._page([p for p in self.pulls.values() if p["state"] == "open"], query)
        if method == "GET" and (m := re.fullmatch(r"/git/commits/(\w+)", path)):
            tree = self.trees.get(m[1])
            return (200, {"sha": m[1], "tree": {"sha": tree}}) if tree else (404, {})
        if method == "GET" and path == "/actions/runs":
            runs = [r for r in self.runs if _matches(r, query)]
            return 200, {"total_count": len(runs), "workflow_runs": self._page(runs, query)}
        if method == "GET" and (m := re.fullmatch(r"/actions/runs/(\d+)/jobs", path)):
            jobs = self.jobs.get(int(m[1]), [])
            return 200, {"total_count": len(jobs), "jobs": self._page(jobs, query)}
        if method == "POST" and re.fullmatch(r"/actions/runs/\d+/cancel", path):
            return 202, {}
        return 404, {"message": f"no such endpoint in the fake: {method} {path}"}


def _matches(run: dict[str, Any], query: dict[str, str]) -> bool:
    fields = {"status": "status", "event": "event", "branch": "head_branch"}
    return all(run.get(field) == query[key] for key, field in fields.items() if key in query)


def pull(
    number: int,
    head_sha: str,
    *,
    fork: bool = False,
    author: str = "contributor",
    branch: str = "topic",
    updated: float = NOW_S,
) -> dict[str, Any]:
    """`GET /pulls/{number}`, trimmed to what the scripts read."""
    head_repo = "contributor/phasebench" if fork else REPO
    return {
        "number": number,
        "state": "open",
        "updated_at": stamp(updated),
        "user": {"login": author},
        "labels": [],
        "head": {"sha": head_sha, "ref": branch, "repo": {"full_name": head_repo}},
        "base": {"ref": "main", "repo": {"full_name": REPO}},
    }
