"""`Rounds` meters a phase's energy over a back-to-back block before its timed rounds, and reads
the device's state around the rounds, never inside them.

A fake energy counter logs when it is read; the fake pytest-benchmark logs each round, and its
`_timer` is a fake clock each call advances. A prefill's counter must bracket a block of the
timed call alone, run after the untimed warm round and before the timed rounds (their setup
never inside the window), and the record must carry its joules per token from that block; a
measurement that is not one phase gets no block.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.harness.device import devstate
from benchmarks.harness.device.energy import EnergyUnavailable
from benchmarks.suite.rounds import Rounds
from tests.suite.test_rounds import FakeBenchmark

CALL_S = 0.01


class TimedBenchmark(FakeBenchmark):
    """A benchmark with a cell's params, pytest-benchmark's round statistics, and a fake
    synchronizing timer (`_timer`, as pytest-benchmark keeps the suite's)."""

    def __init__(self, measurement: str, round_s: list[float]) -> None:
        super().__init__()
        self.params = {"device": "cpu", "batch": 2, "prompt_len": 4}
        self.extra_info["measurement"] = measurement
        self.stats = SimpleNamespace(stats=SimpleNamespace(data=round_s))
        self.now_s = 0.0
        self._timer = lambda: self.now_s


class LoggingCounter:
    source = "rapl:package-0"
    failure = None
    update_period_s = 0.001

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("energy start")

    def stop(self) -> float:
        self.log.append("energy stop")
        return 6.0


def test_a_prefill_block_runs_alone_before_the_rounds_and_makes_its_joules_per_token(
    monkeypatch: pytest.MonkeyPatch,
):
    log: list[str] = []
    monkeypatch.setattr(devstate, "open_energy", lambda *_a, **_k: LoggingCounter(log))
    bench = TimedBenchmark("prefill", [0.01, 0.01, 0.01])

    def prepare() -> None:
        log.append("prepare")

    def call(_: object) -> None:
        bench.now_s += CALL_S
        log.append("round")

    Rounds(call, prepare).pedantic(bench, rounds=3)
    calls = 200  # the 2-s block at the warm round's 10 ms
    block = ["prepare"] * calls + ["energy start"] + ["round"] * calls + ["energy stop"]
    timed = ["prepare", "round"] * 3
    assert log == ["prepare", "round", *block, *timed]  # the warm round, the block, the rounds
    info = bench.extra_info
    assert (info["energy_method"], info["energy_block_calls"]) == ("block:prepared", calls)
    assert info["energy_source"] == "rapl:package-0"
    assert (info["energy_window_j"], info["energy_window_s"]) == (6.0, pytest.approx(2.0))
    # 6 J over 200 prefills of B 2 x P 4 tokens
    assert info["prefill_j_per_tok"] == pytest.approx(6.0 / (calls * 2 * 4))
    assert info["gpu_state_reason"] == "not a CUDA device"


def test_generate_gets_no_block_its_window_is_the_rounds(monkeypatch: pytest.MonkeyPatch):
    log: list[str] = []
    monkeypatch.setattr(devstate, "open_energy", lambda *_a, **_k: LoggingCounter(log))
    bench = TimedBenchmark("generate", [0.01, 0.01])
    Rounds(lambda _: log.append("round")).pedantic(bench, rounds=2)
    assert log == ["round", "energy start", "round", "round", "energy stop"]
    assert bench.extra_info["energy_method"] == "timed_rounds"
    assert "generate_j_per_tok" not in bench.extra_info


def test_without_a_counter_the_record_says_why(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        devstate, "open_energy", lambda *_a, **_k: EnergyUnavailable("permission denied")
    )
    bench = TimedBenchmark("decode", [0.01])
    prepared: list[None] = []
    Rounds(lambda _: None, lambda: prepared.append(None)).pedantic(bench, rounds=1)
    assert len(prepared) == 2  # the warm round's and the round's: no block without a counter
    info: dict[str, Any] = bench.extra_info
    assert info["decode_j_per_tok"] is None
    assert info["energy_method"] == "block:reused"
    assert (info["energy_source"], info["energy_reason"]) == (None, "permission denied")
