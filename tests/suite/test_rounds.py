"""Spec of `benchmarks.suite.rounds.Rounds`: a timed round's memory peak is its own.

A fake allocator tracks "device" blocks by Python lifetime (a block is freed when the last
reference to it goes), so whatever the harness keeps alive shows in the peak exactly as it would
in CUDA's caching allocator. A fake pytest-benchmark `pedantic` keeps the previous round's
return value and arguments alive through the next round, as pytest-benchmark 5.x does
(`fixture.py`, `_raw_pedantic`; FACTS §7). The peak of every round must then be exactly the peak
of the same step run alone: weights + that phase's cache + its activations, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from benchmarks.harness.device import devices, memory
from benchmarks.harness.device.memory import MemoryMonitor
from benchmarks.suite.rounds import Rounds, memory_fields

WEIGHTS = 10_000
LAYERS = 3
PER_POSITION = 8  # bytes per position per layer
ACTIVATIONS = 500
PROMPT = 50


class FakeAllocator:
    """Bytes in live blocks and the peak since the last reset, like CUDA's allocator stats."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    def reset_peak(self) -> None:
        self.peak = self.current

    def block(self, nbytes: int) -> Block:
        return Block(self, nbytes)


class Block:
    def __init__(self, allocator: FakeAllocator, nbytes: int) -> None:
        self.allocator, self.nbytes = allocator, nbytes
        allocator.current += nbytes
        allocator.peak = max(allocator.peak, allocator.current)

    def __del__(self) -> None:
        self.allocator.current -= self.nbytes


class FakeCache:
    """Per-layer blocks; a decode step replaces each layer's block, as `torch.cat` does."""

    def __init__(self, allocator: FakeAllocator, positions: int) -> None:
        self.positions = positions
        self.layers = [allocator.block(positions * PER_POSITION) for _ in range(LAYERS)]


def decode_step(allocator: FakeAllocator, cache: FakeCache) -> FakeCache:
    """One step: activations, then each layer's P + 1 block replaces its P block."""
    activations = allocator.block(ACTIVATIONS)
    for i in range(LAYERS):
        cache.layers[i] = allocator.block((cache.positions + 1) * PER_POSITION)
    cache.positions += 1
    del activations
    return cache


def pytest_benchmark_pedantic(
    target: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    setup: Callable[[], Any] | None = None,
    rounds: int = 1,
    warmup_rounds: int = 0,
) -> Any:
    """pytest-benchmark's round loop, reduced to what matters here: `result` and `args` of one
    round stay bound while the next round's setup and target run."""
    kwargs = kwargs or {}
    result = None
    for _ in range(warmup_rounds + rounds):
        if setup is not None:
            maybe = setup()
            if maybe:
                args, kwargs = maybe
        result = target(*args, **kwargs)
    return result


class FakeBenchmark:
    """`benchmark.pedantic` as above, and the `extra_info` dict every benchmark has."""

    pedantic = staticmethod(pytest_benchmark_pedantic)

    def __init__(self) -> None:
        self.extra_info: dict[str, Any] = {}


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> FakeAllocator:
    """The fake allocator behind `MemoryMonitor` on the CPU (CUDA-style peak counters)."""
    fake = FakeAllocator()

    class Counters:
        labels: ClassVar[dict[str, str]] = {
            "allocated": "a",
            "reserved": "r",
            "peak_allocated": "pa",
            "peak_reserved": "pr",
        }

        def __init__(self, device: object) -> None:
            del device

        def reset_peak(self) -> None:
            fake.reset_peak()

        def read(self) -> tuple[int, int, int, int]:
            return fake.current, fake.current, fake.peak, fake.peak

    monkeypatch.setitem(memory._COUNTERS, "cpu", Counters)
    return fake


def alone_peak(allocator: FakeAllocator) -> int:
    """The peak of one decode step at context P with nothing else alive but the weights."""
    cache = FakeCache(allocator, PROMPT)
    allocator.reset_peak()
    decode_step(allocator, cache)
    peak = allocator.peak
    del cache
    return peak


def test_every_rounds_peak_is_weights_plus_its_cache_plus_activations(allocator):
    weights = allocator.block(WEIGHTS)
    expected = alone_peak(allocator)
    # The step's own peak, spelled out: weights, the P + 1 cache, the last layer's P block
    # that `cat` replaces, and the activations.
    final_cache = LAYERS * (PROMPT + 1) * PER_POSITION
    assert expected == WEIGHTS + final_cache + PROMPT * PER_POSITION + ACTIVATIONS
    assert allocator.current == WEIGHTS  # nothing left over by the measurement itself

    rounds = Rounds(
        lambda cache: decode_step(allocator, cache),
        lambda: FakeCache(allocator, PROMPT),
        MemoryMonitor(devices.resolve_device("cpu")),
    )
    rounds.pedantic(FakeBenchmark(), rounds=4)
    assert [s.peak_allocated_bytes for s in rounds.peaks] == [expected] * 4
    fields = memory_fields(rounds.peaks, {"weights_bytes": WEIGHTS})
    assert fields["peak_allocated_bytes"] == expected
    assert fields["weights_bytes"] == WEIGHTS
    assert rounds.last.positions == PROMPT + 1  # the last output stays readable after the rounds
    del rounds
    assert allocator.current == WEIGHTS
    del weights


def test_a_timed_function_returning_its_cache_would_carry_a_spare_one_into_the_peak(allocator):
    """Why `Rounds` exists: with pytest-benchmark's loop, returning the cache (and passing the
    input as an argument) keeps the previous round's cache alive through the next round."""
    weights = allocator.block(WEIGHTS)
    expected = alone_peak(allocator)
    peaks: list[int] = []

    def setup() -> tuple[tuple[FakeCache], dict[str, Any]]:
        if allocator.current > WEIGHTS:
            peaks.append(allocator.peak)
        cache = FakeCache(allocator, PROMPT)
        allocator.reset_peak()
        return (cache,), {}

    pytest_benchmark_pedantic(lambda c: decode_step(allocator, c), setup=setup, rounds=3)
    stale = LAYERS * (PROMPT + 1) * PER_POSITION
    # Read at the setups of rounds 2 and 3: round 1 is clean, round 2 carries round 1's cache.
    assert peaks == [expected, expected + stale]
    del weights


def test_rounds_keep_what_keep_returns_and_drop_each_output_before_the_next_round(allocator):
    alive_at_setup: list[int] = []

    def prepare() -> FakeCache:
        alive_at_setup.append(allocator.current)
        return FakeCache(allocator, PROMPT)

    rounds = Rounds(lambda cache: decode_step(allocator, cache), prepare, None)
    rounds.pedantic(FakeBenchmark(), rounds=3, keep=lambda cache: cache.positions)
    assert rounds.outputs == [PROMPT + 1] * 3
    assert alive_at_setup == [0, 0, 0, 0]  # the warm round's and every previous round's are gone
    assert rounds.peaks == []  # no monitor, no samples


def test_the_first_timed_round_follows_an_untimed_call_of_exactly_what_is_timed():
    """A module's own path is cold on its first call (a fresh prefill cache, a restored decode
    cache): that call is untimed, so the first timed round runs in the state the others do."""
    calls: list[str] = []
    state = {"warm": False}

    def run(tag: str) -> float:
        calls.append(tag)
        cost = 1.0 if state["warm"] else 1.3  # the first call ever pays the cold path
        state["warm"] = True
        return cost

    prepared = iter(["warm", "r1", "r2", "r3"])
    rounds = Rounds(run, lambda: next(prepared), None)
    rounds.pedantic(FakeBenchmark(), rounds=3, keep=lambda cost: cost)
    assert calls == ["warm", "r1", "r2", "r3"]
    assert rounds.outputs == [1.0, 1.0, 1.0]  # no timed round saw the cold path
