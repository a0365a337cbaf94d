"""The few GitHub REST calls the CI scripts make, over an injectable transport (stdlib only).

Shared by verdict.py (status, labels, acceptance) and pr_comment.py (the sticky comment).
Transient failures (a network error, HTTP 429 or 5xx) are retried with backoff, because a
required status that was never set because of one 502 leaves a pull request stuck; any other
answer outside 2xx raises `ApiError` with its HTTP status, so callers can tell a 403 from a 404.

Rate limits: GitHub answers a spent budget with 403 *or* 429 (GITHUB_TOKEN: 1,000 requests an
hour per repository). Per "Rate limits for the REST API" (docs.github.com, "Handle rate limit
errors appropriately"): with `retry-after`, wait that many seconds; with `x-ratelimit-remaining:
0`, wait until `x-ratelimit-reset` (epoch seconds); a secondary limit without either, at least
a minute. Such a 403 is waited out like a 429 when the wait fits `max_rate_wait` (default 300 s)
and the deadline, else it raises at once with when to re-run; `ApiError.rate_limited` tells it
apart from a 403 of missing permissions, which is never retried.

Deadline: a job's calls share one inside its `timeout-minutes` (`from_env`): no wait or retry
runs past it, and a call after it raises
`ApiError` with `deadline` set, so a job whose rate limit is spent still ends by itself and says
what it could not post, instead of being cancelled by its timeout with nothing said.

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
# A secondary rate limit that names no wait: GitHub says to wait at least a minute.
SECONDARY_WAIT_S = 60.0

# An answer: (status, parsed JSON or None[, response headers]). Headers are optional so that a
# transport which has none to give (a test's recorded payloads) still fits.
Answer = tuple[int, Any] | tuple[int, Any, Mapping[str, str]]
Transport = Callable[[str, str, bytes | None, Mapping[str, str]], Answer]


class ApiError(Exception):
    """A REST call failed; `status` is its HTTP status (0: no answer); `rate_limited` when
    GitHub refused it for a spent rate limit (a 403 or 429 with the limit's headers)."""

    def __init__(
        self, message: str, status: int = 0, *, rate_limited: bool = False, deadline: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.rate_limited = rate_limited
        self.deadline = deadline


def rate_limit_wait(status: int, data: Any, headers: Mapping[str, str], now: float) -> float | None:
    """Seconds GitHub asks to wait before retrying this answer; None when it is not a rate
    limit (a 403 for missing permissions, a 404, a 5xx). Header names are lower case."""
    if status not in (403, 429):
        return None
    retry_after = headers.get("retry-after", "").strip()
    if retry_after.isdigit():
        return float(retry_after)
    reset = headers.get("x-ratelimit-reset", "").strip()
    if headers.get("x-ratelimit-remaining", "").strip() == "0" and reset.isdigit():
        return max(0.0, float(reset) - now) + 1.0  # the reset second itself may still refuse
    message = str(data.get("message", "")) if isinstance(data, dict) else ""
    if "rate limit" in message.lower() or status == 429:
        return SECONDARY_WAIT_S
    return None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def urllib_transport(
    method: str, url: str, body: bytes | None, headers: Mapping[str, str]
) -> tuple[int, Any, Mapping[str, str]]:
    """Send one request; returns (status, parsed JSON or None, headers with lower-case names);
    status 0 for no answer."""
    if not url.startswith("https://"):
        raise ApiError(f"refusing a non-https API URL: {url}")
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            got = {k.lower(): v for k, v in response.headers.items()}
            text = response.read().decode("utf-8")
            return response.status, json.loads(text) if text else None, got
    except urllib.error.HTTPError as exc:
        # The body of an error names a secondary rate limit; the headers carry the waits.
        got = {k.lower(): v for k, v in (exc.headers or {}).items()}
        return exc.code, _json(exc.read()), got
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError):
        return 0, None, {}


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
        clock: Callable[[], float] = time.time,
        max_rate_wait: float = 300.0,
        deadline: float | None = None,
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
        self._clock = clock
        self._max_rate_wait = max_rate_wait
        self._deadline = deadline

    def _left(self) -> float:
        """Seconds before the deadline (infinite without one)."""
        return float("inf") if self._deadline is None else self._deadline - self._clock()

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        where = f"{method} {path.split('?', maxsplit=1)[0]}"
        status, waited, wait, late = 0, 0.0, None, False
        for attempt in range(1, self._attempts + 1):
            if self._left() <= 0:
                raise ApiError(
                    f"{where} not sent: the job's deadline for API calls has passed "
                    f"(after {attempt - 1} attempt(s))",
                    status,
                    deadline=True,
                )
            answer = self._transport(method, f"{self._base}{path}", body, headers)
            status, data = answer[0], answer[1]
            got = {k.lower(): v for k, v in answer[2].items()} if len(answer) == 3 else {}
            if 200 <= status < 300:
                return data
            wait = rate_limit_wait(status, data, got, self._clock())
            if wait is not None and (waited + wait > self._max_rate_wait or wait >= self._left()):
                raise ApiError(
                    f"{where} answered HTTP {status}: the token's API rate limit is spent for "
                    f"{wait:.0f} s more (x-ratelimit-remaining "
                    f"{got.get('x-ratelimit-remaining', '?')}, reset "
                    f"{got.get('x-ratelimit-reset', '?')}, retry-after "
                    f"{got.get('retry-after', '-')}), longer than this job waits "
                    f"({min(self._max_rate_wait - waited, max(self._left(), 0.0)):.0f} s): "
                    "re-run the job after the reset",
                    status,
                    rate_limited=True,
                    deadline=wait >= self._left(),
                )
            if (wait is None and status not in RETRIED) or attempt == self._attempts:
                break
            # 2, 4, 8 s for a transient failure; a rate limit's own wait when it names one.
            pause = max(2.0**attempt, wait or 0.0)
            late = pause >= self._left()
            if late:
                break  # no retry fits before the deadline: the error below says what failed
            waited += pause if wait is not None else 0.0
            self._sleep(pause)
        text = "no answer (network)" if status == 0 else f"HTTP {status}"
        limited = status in (403, 429) and wait is not None
        why = "; no retry fits before the job's deadline" if late else ""
        raise ApiError(f"{where} answered {text}{why}", status, rate_limited=limited, deadline=late)

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
        """The commit statuses of `sha`, newest first, every page (a commit that other tools
        set 100 statuses on would push ours off the first)."""
        return self._pages(f"/commits/{sha}/statuses", max_pages=10)

    def run(self, run_id: int) -> Any:
        """GET /actions/runs/{run_id}."""
        return self._call("GET", f"/actions/runs/{run_id}")

    def runs(self, query: str, max_pages: int = 5) -> list[Any]:
        """Workflow runs of this repository (`query`: e.g. `status=queued&event=push`)."""
        return self._pages(f"/actions/runs?{query}", max_pages=max_pages)

    def jobs(self, run_id: int) -> list[Any]:
        """The jobs of a run's latest attempt (`status`, `created_at`, `labels`, `name`)."""
        return self._pages(f"/actions/runs/{run_id}/jobs?filter=latest", max_pages=5)

    def cancel(self, run_id: int) -> Any:
        """POST /actions/runs/{run_id}/cancel (`actions: write`)."""
        return self._call("POST", f"/actions/runs/{run_id}/cancel", {})

    def open_pulls(self, max_pages: int = 3) -> list[Any]:
        """Open pull requests, the most recently updated first."""
        return self._pages("/pulls?state=open&sort=updated&direction=desc", max_pages=max_pages)

    def tree_of(self, sha: str) -> str:
        """The tree of commit `sha` (GET /git/commits/{sha}; `contents: read`)."""
        answer = self._call("GET", f"/git/commits/{sha}")
        tree = answer.get("tree") if isinstance(answer, dict) else None
        found = tree.get("sha") if isinstance(tree, dict) else None
        if not isinstance(found, str) or SHA.fullmatch(found) is None:
            raise ApiError(f"GET /git/commits/{sha[:12]} names no tree")
        return found

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


def from_env(env: Mapping[str, str], transport: Transport | None = None) -> GitHub:
    """The repository's API as a workflow step sees it: `GITHUB_API_URL` (default
    api.github.com), `GITHUB_REPOSITORY`, `GITHUB_TOKEN`, and the deadline: `PHASEBENCH_DEADLINE`
    (epoch seconds, set by a job's first step when several steps share it) or
    `PHASEBENCH_BUDGET_S` (seconds from now, for a job whose one step makes the calls); ApiError
    for a malformed repository or deadline."""
    deadline = None
    for name, base in (("PHASEBENCH_DEADLINE", 0.0), ("PHASEBENCH_BUDGET_S", time.time())):
        raw = env.get(name, "").strip()
        if raw and not raw.isdigit():
            raise ApiError(f"{name} {raw[:40]!r} is not a whole number of seconds")
        if raw and deadline is None:
            deadline = base + float(raw)
    return GitHub(
        env.get("GITHUB_API_URL", "https://api.github.com"),
        env.get("GITHUB_REPOSITORY", ""),
        env.get("GITHUB_TOKEN", ""),
        transport or urllib_transport,
        deadline=deadline,
    )
