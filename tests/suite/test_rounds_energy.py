"""`Rounds` reads the device's state and energy around a benchmark's timed rounds, never inside.

A fake energy counter logs when it is read; the fake pytest-benchmark logs each round. The
counter must be read once before the first round and once after the last (a reading per step
would be below the counters' resolution), and a prefill record must carry its joules per token
from that window.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.harness.device import devstate
from benchmarks.harness.device.energy import EnergyUnavailable
from benchmarks.suite import Rounds
from tests.suite.test_rounds import FakeBenchmark


class TimedBenchmark(FakeBenchmark):
    """A benchmark with a cell's params and pytest-benchmark's round statistics."""

    def __init__(self, measurement: str, round_s: list[float]) -> None:
        super().__init__()
        self.params = {"device": "cpu", "batch": 2, "prompt_len": 4}
        self.extra_info["measurement"] = measurement
        self.stats = SimpleNamespace(stats=SimpleNamespace(data=round_s))


class LoggingCounter:
    source = "rapl:package-0"
    failure = None

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("energy start")

    def stop(self) -> float:
        self.log.append("energy stop")
        return 6.0


def test_the_counter_brackets_the_rounds_and_prefill_gets_joules_per_token(
    monkeypatch: pytest.MonkeyPatch,
):
    log: list[str] = []
    monkeypatch.setattr(devstate, "open_energy", lambda *_a, **_k: LoggingCounter(log))
    bench = TimedBenchmark("prefill", [0.01, 0.01, 0.01])
    Rounds(lambda _: log.append("round")).pedantic(bench, rounds=3)
    # The untimed warm round runs before the window: only the timed rounds are billed.
    assert log == ["round", "energy start", "round", "round", "round", "energy stop"]
    info = bench.extra_info
    assert info["energy_source"] == "rapl:package-0"
    assert info["energy_window_j"] == 6.0
    # mean power over the window x 0.03 timed seconds / (3 rounds x B 2 x P 4 tokens)
    expected = 6.0 / info["energy_window_s"] * 0.03 / (3 * 2 * 4)
    assert info["prefill_j_per_tok"] == pytest.approx(expected)
    assert info["gpu_state_reason"] == "not a CUDA device"


def test_without_a_counter_the_record_says_why(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        devstate, "open_energy", lambda *_a, **_k: EnergyUnavailable("permission denied")
    )
    bench = TimedBenchmark("decode", [0.01])
    Rounds(lambda _: None).pedantic(bench, rounds=1)
    info: dict[str, Any] = bench.extra_info
    assert info["decode_j_per_tok"] is None
    assert (info["energy_source"], info["energy_reason"]) == (None, "permission denied")
