"""The turnstile's other end: keeps the two sides' timed rounds in step, one round at a time.

Each side (a pytest process loading `turnstile`) holds one connection to a UNIX socket and
sends one JSON object per line:

    {"op": "hello", "side": "base", "pid": N} once, on connect
    {"op": "plan", "keys": [nodeid, ...]}    once, after collection (the run's test order)
    {"op": "enter", "key": K, "rounds": n}   before a benchmark's rounds -> "paired" | "alone"
    {"op": "turn", "round": i}               before round i (and after round i - 1) -> "go"
                                             (or "stop": enough pairs, see below)
    {"op": "leave"}                          after the rounds -> "release"

`Referee` is the pure state machine (no I/O; `tests/ab/test_order.py` drives it): a benchmark
both sides enter is *paired*: its rounds are granted one at a time in `order.turn_sequence`
order, so while one side times a round the other waits on its socket, and both are released
together when both have left, so neither side's untimed work overlaps the other's timed round.
A benchmark only one side will time (a cell the other side skipped, failed before its rounds,
or has already passed; a side that has exited) runs *alone*, unpaired. When both sides wait at
different benchmarks, the one earlier in the run's order goes alone first, so the two can never
deadlock. `Coordinator` serves the socket in threads and logs every granted turn.

A benchmark's pairs are bounded by time and precision: after `min_pairs` pairs and `budget_s`
of paired rounds, both sides are told to `stop` at the next pair boundary once the pairs' 95 %
half-width (on the coordinator's own clock: `precision.half_width`) is `target_half_width`, or
the rounds took `max_s` (each side asked for `--pairs` rounds, the most it will run). The rule
reads the clock and the pairs' spread, never which side was faster: it cannot steer a verdict.

Before it grants a turn, the coordinator waits (at most `SETTLE_S`) until no thread of the
*other* side's process is runnable (`/proc/PID/task/*/stat`, Linux). Without that, the other
side's OpenMP workers, which spin for a while after their last parallel region, compete for the
cores with the round being timed: on a 2-core machine that added ~3 ms to a 0.5 ms decode step
whenever the sides switched, and to no round that followed one of its own side.

It deliberately does not start the sides (`run`) or judge anything (`reports/analysis/paired.py`).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.ab.order import SIDES, turn_sequence
from benchmarks.ab.precision import half_width

SETTLE_S = 0.2  # the longest wait for the other side's threads to go idle before a turn
_POLL_S = 0.0002

Reply = tuple[str, dict[str, Any]]  # (side, message)


@dataclass
class _Side:
    plan: dict[str, int] | None = None  # nodeid -> position in this side's run order
    passed: int = -1  # position of the last benchmark this side entered
    waiting: str | None = None  # "enter", "turn", "leave" or None (busy)
    key: str = ""
    rounds: int = 0
    running: bool = False  # a granted turn whose round is being timed
    gone: bool = False


@dataclass
class _Pairing:
    key: str
    sequence: list[tuple[str, int]]
    started_s: float = 0.0
    pointer: int = 0
    left: set[str] = field(default_factory=set)
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIDES, 0))
    granted_s: dict[str, float] = field(default_factory=dict)  # the clock at each side's grant
    durations_s: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})


@dataclass(frozen=True)
class PairBudget:
    """When a benchmark has enough pairs: `min_pairs` done and `budget_s` of rounds spent, and
    then the pairs' 95 % half-width at most `target_half_width` (0: no precision rule) or
    `max_s` of rounds spent."""

    min_pairs: int
    budget_s: float
    target_half_width: float = 0.0
    max_s: float = math.inf


class Referee:
    """Decides, event by event, which side may time what (see the module docstring)."""

    def __init__(
        self,
        rng: random.Random,
        on_grant: Callable[[str, str, int, bool], None] | None = None,
        budget: PairBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rng = rng
        self._sides = {side: _Side() for side in SIDES}
        self._pairing: _Pairing | None = None
        self._on_grant = on_grant  # (key, side, round, paired)
        self._budget = budget  # None: every side times all the rounds it announced
        self._clock = clock

    def plan(self, side: str, keys: list[str]) -> list[Reply]:
        """`side` will run these benchmarks (test node ids), in this order."""
        self._sides[side].plan = {key: index for index, key in enumerate(keys)}
        return self._resolve()

    def enter(self, side: str, key: str, rounds: int) -> list[Reply]:
        """`side` is about to time `rounds` rounds of benchmark `key`."""
        state = self._sides[side]
        state.waiting, state.key, state.rounds = "enter", key, rounds
        if state.plan is not None and key in state.plan:
            state.passed = max(state.passed, state.plan[key])
        return self._resolve()

    def turn(self, side: str, index: int) -> list[Reply]:
        """`side` finished its previous round (if any) and asks to time round `index`."""
        self._finish_round(side)
        state = self._sides[side]
        state.waiting = "turn"
        return self._resolve()

    def leave(self, side: str) -> list[Reply]:
        """`side` is done with the benchmark's rounds (normally or by an exception)."""
        self._finish_round(side)
        self._sides[side].waiting = "leave"
        return self._resolve()

    def gone(self, side: str) -> list[Reply]:
        """`side` disconnected (its pytest process ended): nothing of it is waited for again."""
        state = self._sides[side]
        state.gone, state.waiting, state.running = True, None, False
        return self._resolve()

    # --- internals --------------------------------------------------------------------------

    def _other(self, side: str) -> _Side:
        return self._sides[SIDES[1] if side == SIDES[0] else SIDES[0]]

    def _finish_round(self, side: str) -> None:
        state = self._sides[side]
        if state.running and (pairing := self._pairing) is not None:
            pairing.pointer += 1
            pairing.done[side] += 1
            if side in pairing.granted_s:
                pairing.durations_s[side].append(self._clock() - pairing.granted_s.pop(side))
        state.running = False

    def _will_never_enter(self, other: _Side, key: str) -> bool:
        if other.gone:
            return True
        if other.plan is None:
            return False  # not collected yet: wait for its plan
        position = other.plan.get(key)
        # Entered already: a later benchmark, or this one (timing it alone, or done with it).
        return (
            position is None
            or other.passed > position
            or (other.passed == position and other.waiting != "enter")
        )

    def _resolve(self) -> list[Reply]:
        replies: list[Reply] = []
        while True:
            step = self._pairing_step() if self._pairing is not None else self._entry_step()
            if not step:
                return replies
            replies += step

    def _entry_step(self) -> list[Reply]:
        entering = [s for s in SIDES if self._sides[s].waiting == "enter"]
        if len(entering) == 2 and self._sides[SIDES[0]].key == self._sides[SIDES[1]].key:
            return self._start_pairing()
        for side in entering:
            state, other = self._sides[side], self._other(side)
            if self._will_never_enter(other, state.key):
                return [self._alone(side)]
        if len(entering) == 2:
            # Both wait at different benchmarks: the one earlier in the run order goes first.
            base, head = (self._sides[s] for s in SIDES)
            order = base.plan or head.plan or {}
            first = min(entering, key=lambda s: order.get(self._sides[s].key, -1))
            return [self._alone(first)]
        return []

    def _alone(self, side: str) -> Reply:
        state = self._sides[side]
        state.waiting = None
        if self._on_grant is not None:
            self._on_grant(state.key, side, -1, False)
        return (side, {"op": "alone", "key": state.key})

    def _start_pairing(self) -> list[Reply]:
        base, head = (self._sides[s] for s in SIDES)
        rounds = {SIDES[0]: base.rounds, SIDES[1]: head.rounds}
        sequence = turn_sequence(rounds, self._rng)
        self._pairing = _Pairing(base.key, sequence, started_s=self._clock())
        base.waiting = head.waiting = None
        return [(s, {"op": "paired"}) for s in SIDES]

    def _pairing_step(self) -> list[Reply]:
        pairing = self._pairing
        assert pairing is not None
        for side in SIDES:
            state = self._sides[side]
            if state.gone or state.waiting == "leave":
                pairing.left.add(side)
        # Skip the turns of a side that left early (an exception in its rounds) or exited.
        seq = pairing.sequence
        while pairing.pointer < len(seq) and seq[pairing.pointer][0] in pairing.left:
            pairing.pointer += 1
        if len(pairing.left) == 2:
            self._pairing = None
            released = [s for s in SIDES if self._sides[s].waiting == "leave"]
            for side in released:
                self._sides[side].waiting = None
            return [(s, {"op": "release"}) for s in released]
        running = any(self._sides[s].running for s in SIDES)
        if running:
            return []
        if self._enough(pairing):
            return self._stop(pairing)
        for side in SIDES:
            state = self._sides[side]
            if state.waiting != "turn":
                continue
            scheduled = [i for i, (s, _) in enumerate(seq[pairing.pointer :]) if s == side]
            due = pairing.pointer < len(seq) and seq[pairing.pointer][0] == side
            if due or not scheduled:  # its turn, or a round beyond what it announced
                state.waiting, state.running = None, True
                index = seq[pairing.pointer][1] if due else -1
                if not due:
                    pairing.sequence.insert(pairing.pointer, (side, index))
                if self._on_grant is not None:
                    self._on_grant(pairing.key, side, index, True)
                pairing.granted_s[side] = self._clock()
                return [(side, {"op": "go", "key": pairing.key, "round": index})]
        return []

    def _stop(self, pairing: _Pairing) -> list[Reply]:
        for side in SIDES:
            self._sides[side].waiting = None
        pairing.pointer = len(pairing.sequence)  # nothing more is granted; both now leave
        return [(s, {"op": "stop", "key": pairing.key, "pairs": pairing.done[s]}) for s in SIDES]

    def _enough(self, pairing: _Pairing) -> bool:
        """Both sides at a pair boundary, asking for more, with the budget's pairs and time."""
        budget = self._budget
        if budget is None or pairing.left:
            return False
        done = pairing.done
        elapsed_s = self._clock() - pairing.started_s
        if not (
            all(self._sides[s].waiting == "turn" for s in SIDES)
            and done[SIDES[0]] == done[SIDES[1]] >= budget.min_pairs
            and elapsed_s >= budget.budget_s
        ):
            return False
        if budget.target_half_width <= 0 or elapsed_s >= budget.max_s:
            return True
        return half_width(*(pairing.durations_s[s] for s in SIDES)) <= budget.target_half_width


def runnable_threads(pid: int) -> int | None:
    """How many threads of process `pid` are running or runnable now (None: cannot tell)."""
    count = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        for task in tasks:
            stat = (task / "stat").read_text(encoding="ascii", errors="replace")
            # The state is the first field after the command name, which sits in parentheses.
            count += stat[stat.rindex(")") + 2 : stat.rindex(")") + 3] == "R"
    except (OSError, ValueError):
        return None
    return count


def wait_until_idle(pid: int, timeout_s: float = SETTLE_S) -> float:
    """Poll until no thread of `pid` is runnable, at most `timeout_s`; return the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if not runnable_threads(pid):  # 0, or None where /proc cannot tell
            break
        time.sleep(_POLL_S)
    return time.perf_counter() - started


class Coordinator:
    """Serves a `Referee` on a UNIX socket, one thread per side; logs turns to `log_path`."""

    def __init__(
        self, socket_path: Path, log_path: Path, seed: int, budget: PairBudget | None = None
    ) -> None:
        self.socket_path = socket_path
        self._log = log_path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._referee = Referee(random.Random(seed), budget=budget)
        self._connections: dict[str, socket.socket] = {}
        self._pids: dict[str, int] = {}
        self.settle_s = 0.0  # total time spent waiting for the other side to go idle
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(socket_path))
        self._server.listen(2)
        self._threads: list[threading.Thread] = []
        self.paired_turns = 0
        self.alone_benchmarks = 0
        accept = threading.Thread(target=self._accept, name="ab-accept", daemon=True)
        accept.start()

    def _log_turn(self, side: str, message: dict[str, Any], settle_s: float) -> None:
        # Called under self._lock, from _send, right before the side is told to go.
        paired = message["op"] == "go"
        if paired:
            self.paired_turns += 1
        else:
            self.alone_benchmarks += 1
        entry = {"key": message["key"], "side": side, "round": message.get("round", -1)}
        self._write_log({**entry, "paired": paired, "settle_s": round(settle_s, 6)})

    def _write_log(self, entry: dict[str, Any]) -> None:
        # Under self._lock: one JSON line, stamped with the seconds since the coordinator began.
        stamped = {"t_s": round(time.perf_counter() - self._started, 6), **entry}
        self._log.write(json.dumps(stamped) + "\n")
        self._log.flush()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        side = ""
        with connection, connection.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                message = json.loads(line)
                if message.get("op") == "hello":
                    side = str(message["side"])
                    with self._lock:
                        self._connections[side] = connection
                        self._pids[side] = int(message.get("pid", 0))
                    continue
                self._handle(side, message)
        if side:
            with self._lock:
                self._send(self._referee.gone(side))

    def _handle(self, side: str, message: dict[str, Any]) -> None:
        op = message.get("op")
        with self._lock:
            referee = self._referee
            if op == "plan":
                replies = referee.plan(side, list(message["keys"]))
            elif op == "enter":
                replies = referee.enter(side, str(message["key"]), int(message["rounds"]))
            elif op == "turn":
                replies = referee.turn(side, int(message["round"]))
            elif op == "leave":
                replies = referee.leave(side)
            else:
                raise ValueError(f"unknown turnstile message {message!r}")
            self._send(replies)

    def _send(self, replies: list[Reply]) -> None:
        for side, message in replies:
            other = self._pids.get(SIDES[1] if side == SIDES[0] else SIDES[0])
            settle_s = 0.0
            if message["op"] == "go" and other:
                settle_s = wait_until_idle(other)
                self.settle_s += settle_s
            if message["op"] in ("go", "alone"):
                self._log_turn(side, message, settle_s)
            elif message["op"] == "stop":
                self._write_log({**message, "side": side})
            connection = self._connections.get(side)
            if connection is not None:
                # A side that is gone is reported by its reader thread.
                with contextlib.suppress(OSError):
                    connection.sendall((json.dumps(message) + "\n").encode())

    def close(self) -> None:
        """Stop serving and close the turn log."""
        self._server.close()
        with self._lock:
            self._log.close()
