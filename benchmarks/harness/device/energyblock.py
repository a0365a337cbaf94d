"""The energy block: a phase's timed call run back to back, alone under the energy counter.

Why not meter the timed rounds: each round's untimed setup sits in their window (an 8B b8 P4096
decode restores ~4.3 GB of KV, ~0.3 s, around a ~25 ms step), and a prefill or decode window
of 15-300 ms is one to three updates of NVML's 100-ms energy counter. Charging that window's
mean power to the timed seconds made decode J/token 2-3x low and mostly noise (issue 30, row
2). Instead, after the untimed warm round and before the timed rounds, the timed call runs
`plan_calls` times in a row (`devstate.RoundsMeter.block_for`), for about
`ENERGY_BLOCK_TARGET_S` (>= `energy.ENERGY_MIN_WINDOW_S`, >= 10 counter updates), and
`RoundsMeter.block` meters exactly that span. How each phase gets its calls' inputs, and what
that makes the figure (`energy_method`):

* **prefill**, `block:prepared`: every call's input (the prompt's H2D copy, its start cache) is
  made before the span, one per call, each dropped once its call ran: no setup inside the span,
  no sync between calls. Where two inputs share an object (a static cache, reset in place by
  each setup: on transformers 5.x, which takes no `cache_position`, a second prefill into an
  unreset static cache would write past its end), `block:interleaved`: each call's setup runs
  just before it, inside the span, between two synchronizing reads of the clock, and its
  seconds are recorded (`energy_block_setup_s`); over `ENERGY_MAX_SETUP_SHARE` of the window,
  no figure. Its energy is in the window: the figure is high by at most about that share.
* **decode**, `block:reused`: one restored cache at P, before the span; the step (same token,
  same position argument) runs on it again and again. Each step adds a position (on 4.x a
  static cache given `cache_position` P rewrites slot P instead), so the steps run at contexts
  P+1 ... P+calls; at most N - 1 of them (`new_tokens`), the room the cell guarantees in its
  static cache and the model's positions (the steps `test_generate` runs). Restoring a cache
  per step would make the block mostly restore, the fault being fixed; where N - 1 steps are
  too short a window for the counter there is no figure, and the reason says so.

Other measurements (generate, overhead) have no block: their rounds are not one phase.
The block runs inside the rounds' compile and CUDA-graph guards (`suite.Rounds.pedantic`): it
calls exactly what is timed, so a compilation or a skipped graph there fails the cell as in the
rounds. Its cost is the block's seconds per prefill and decode benchmark, where a counter exists.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# How a phase's block gets its calls' inputs (module docstring), by measurement.
BLOCK_INPUTS = {"prefill": "prepared", "decode": "reused"}

ENERGY_BLOCK_TARGET_S = 2.0
"""The block's planned length: twice the metered minimum, so a call time estimated 2x too long
still leaves a window the counter resolves (20 NVML updates: <= 5 % quantisation)."""

ENERGY_BLOCK_MAX_CALLS = 5000
"""At most this many calls (sub-ms calls on a fast device)."""

ENERGY_MAX_SETUP_SHARE = 0.1
"""The most of an interleaved block's window its setup may take and still make a figure."""

_PLAIN = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class Block:
    """A prepared block: its `energy_method`, its calls, and the body that makes them (returns
    the seconds of setup it ran inside the span, 0 for a block without)."""

    method: str
    calls: int
    body: Callable[[], float]


def block_calls(
    call_s: float,
    target_s: float = ENERGY_BLOCK_TARGET_S,
    max_calls: int = ENERGY_BLOCK_MAX_CALLS,
) -> int:
    """Calls of `call_s` seconds (the warm round's, synchronized) that fill `target_s`."""
    if call_s <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(target_s / call_s)))


def plan_calls(inputs: str, params: Mapping[str, object], call_s: float) -> tuple[int, str | None]:
    """How many calls the block makes, and what capped it below the target (None: nothing).

    A `reused` block's steps each take a position of the one cache: at most the N - 1 steps
    past P the cell guarantees room for (at least the one timed step)."""
    calls = block_calls(call_s)
    if inputs != "reused":
        return calls, None
    new_tokens = params.get("new_tokens")
    if not isinstance(new_tokens, int):
        return 1, "the cell names no new_tokens: one step is all its cache is known to hold"
    room = max(new_tokens - 1, 1)
    if calls <= room:
        return calls, None
    return room, f"one restored cache holds N - 1 = {room} decode step(s) past P"


def make_block(
    inputs: str,
    run: Callable[[Any], Any],
    prepare: Callable[[], Any] | None,
    calls: int,
    timer: Callable[[], float],
) -> Block:
    """Prepare a block of `calls` calls of `run` (module docstring) and return it. Outputs are
    dropped at once (a CUDA-graph replay may overwrite them at the next call)."""

    def make() -> Any:
        return prepare() if prepare is not None else None

    if inputs == "reused":
        one = make()

        def reused() -> float:
            for _ in range(calls):
                run(one)
            return 0.0

        return Block("block:reused", calls, reused)
    if inputs != "prepared":
        raise ValueError(f"unknown block inputs {inputs!r}: one of {sorted(BLOCK_INPUTS.values())}")
    queue = deque([make()])
    if calls > 1:
        queue.append(make())
        if _shared(queue[0], queue[1]):
            queue.clear()  # every call must make its own, just before it runs
            return Block("block:interleaved", calls, _interleaved(run, make, calls, timer))
        queue.extend(make() for _ in range(calls - 2))

    def prepared() -> float:
        while queue:
            run(queue.popleft())  # the input goes with its call: one cache at a time
        return 0.0

    return Block("block:prepared", calls, prepared)


def _interleaved(
    run: Callable[[Any], Any], make: Callable[[], Any], calls: int, timer: Callable[[], float]
) -> Callable[[], float]:
    def body() -> float:
        setup_s = 0.0
        for _ in range(calls):
            start_s = timer()  # the previous call is done: the setup alone is timed
            state = make()
            setup_s += timer() - start_s
            run(state)
            del state
        return setup_s

    return body


def _shared(first: Any, second: Any) -> bool:
    """Whether two prepared inputs hold one object (by identity): state a setup rewrites."""

    def parts(state: Any) -> set[int]:
        items = state if isinstance(state, tuple | list) else (state,)
        return {id(item) for item in items if not isinstance(item, _PLAIN)}

    return bool(parts(first) & parts(second))
