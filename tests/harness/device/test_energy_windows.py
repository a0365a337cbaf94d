"""Energy windows a counter can resolve, and a block that holds the timed call alone (issue 30,
row 2), on a fake clock and a fake NVML whose energy counter advances every 100 ms.

The fake device (`Timeline`) draws a known power in each stretch of fake time: idle, a 0.3-s
KV restore (the decode setup), 25-ms decode steps. NVML's counter, read at any moment, holds
the energy up to its last 100-ms update, as the real one does. The true decode figure is then
known exactly (400 W x 25 ms / B 8 = 1.25 J/token), and the counter's quantisation is one
update of the step's power over the block's tokens.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.harness.device.devstate import RoundsMeter
from benchmarks.harness.device.energy import (
    ENERGY_MIN_WINDOW_S,
    NVML_ENERGY_UPDATE_PERIOD_S,
    EnergyUnavailable,
    counter_updates,
    min_window_s,
    open_energy,
    short_window_reason,
)
from benchmarks.harness.device.energyblock import (
    ENERGY_BLOCK_MAX_CALLS,
    Block,
    block_calls,
    make_block,
    plan_calls,
)
from benchmarks.harness.device.nvml import open_gpu
from benchmarks.harness.device.powermetrics import PowermetricsSampler
from benchmarks.harness.records import phase_energy_fields
from tests.harness.device.fake_nvml import UUIDS, FakeGpu, FakeNvml, torch_sees

PERIOD_S = 0.1  # the fake counter's update period, as NVML's
IDLE_W, RESTORE_W, STEP_W = 80.0, 120.0, 400.0
RESTORE_S, STEP_S = 0.3, 0.025
BATCH = 8
CELL = {"batch": BATCH, "prompt_len": 4096, "new_tokens": 256}
TRUE_J_PER_TOK = STEP_W * STEP_S / BATCH  # 1.25 J
# The counter misses at most one update of the block's power at its end (the start waits for
# an update): over the block's tokens.
QUANTUM_J_PER_TOK = STEP_W * PERIOD_S / (block_calls(STEP_S) * BATCH)


class Timeline:
    """A fake clock, and the power the fake device draws over it (idle unless told)."""

    def __init__(self, start_s: float = 0.037) -> None:
        self.now_s = start_s  # not on an update: a window's edges fall between updates
        self.busy: list[tuple[float, float, float]] = []  # (from_s, to_s, watts)

    def clock(self) -> float:
        return self.now_s

    def spend(self, seconds: float, watts: float) -> None:
        self.busy.append((self.now_s, self.now_s + seconds, watts))
        self.now_s += seconds

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds  # idle

    def energy_j(self, until_s: float) -> float:
        extra = sum(
            (watts - IDLE_W) * max(0.0, min(to_s, until_s) - from_s)
            for from_s, to_s, watts in self.busy
        )
        return IDLE_W * until_s + extra


class CountingNvml(FakeNvml):
    """One GPU whose total-energy counter (mJ) advances every `PERIOD_S` of the timeline."""

    def __init__(self, timeline: Timeline) -> None:
        super().__init__([FakeGpu(UUIDS[0])])
        self.timeline = timeline

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:  # noqa: N802 - pynvml
        updated_s = math.floor(self.timeline.now_s / PERIOD_S) * PERIOD_S
        return int(self.timeline.energy_j(updated_s) * 1000)


def gpu_meter(timeline: Timeline, cell: dict[str, int] = CELL) -> RoundsMeter:
    return RoundsMeter(
        torch.device("cuda", 0),
        params=cell,
        open_nvml=partial(open_gpu, nvml=CountingNvml(timeline), torch_uuid=torch_sees(0)),
        clock=timeline.clock,
        sleep=timeline.sleep,
    )


def decode_fakes(timeline: Timeline, restore_w: float = RESTORE_W) -> tuple[Any, Any]:
    """test_decode's setup (restore the KV) and timed call (one step), on the fake device."""

    def restore() -> str:
        timeline.spend(RESTORE_S, restore_w)
        return "cache at P"

    def step(cache: str) -> str:
        assert cache == "cache at P"
        timeline.spend(STEP_S, STEP_W)
        return "token"

    return step, restore


def decode_block(timeline: Timeline, restore_w: float = RESTORE_W) -> dict[str, Any]:
    meter = gpu_meter(timeline)
    step, restore = decode_fakes(timeline, restore_w)
    meter.block_for({"measurement": "decode"}, step, restore, call_s=STEP_S, timer=timeline.clock)
    meter.start()
    info = {"measurement": "decode", **meter.stop()}
    return {**info, **phase_energy_fields(info, [STEP_S] * 3, CELL)}


def test_the_counters_update_period_is_named_and_sets_the_shortest_window():
    assert NVML_ENERGY_UPDATE_PERIOD_S == PERIOD_S
    assert min_window_s(NVML_ENERGY_UPDATE_PERIOD_S) == pytest.approx(1.0)  # 10 updates
    assert min_window_s(0.001) == ENERGY_MIN_WINDOW_S  # RAPL: the floor still holds
    assert min_window_s(0.5) == pytest.approx(5.0)
    assert counter_updates(2.05, 0.1) == 20
    assert short_window_reason("nvml:total_energy", 1.0, 0.1) is None
    reason = short_window_reason("nvml:total_energy", 0.025, 0.1)
    assert reason is not None
    assert "spans 0 update(s)" in reason
    assert "100 ms" in reason


def test_fake_a_25_ms_decode_step_window_is_no_figure_with_the_reason():
    # Before: the counter happened to update inside the 25 ms, so the window read 11.2 J (100 ms
    # of mostly idle energy) and the step got 1.4 J/token. The window spans no whole update: it
    # says so, and no J/token is made.
    timeline = Timeline(start_s=0.09)  # the step straddles the update at 0.1 s
    meter = gpu_meter(timeline)
    meter.start()
    timeline.spend(STEP_S, STEP_W)
    info = {"measurement": "decode", **meter.stop()}
    info.update(phase_energy_fields(info, [STEP_S], CELL))
    assert info["energy_window_j"] is None
    assert info["decode_j_per_tok"] is None
    assert "spans 0 update(s)" in info["energy_reason"]
    assert "1 s" in info["energy_reason"]
    assert (info["energy_counter_updates"], info["energy_counter_period_s"]) == (0, 0.1)


def test_fake_a_back_to_back_decode_block_gives_the_joules_per_token_within_one_update():
    info = decode_block(Timeline())
    assert info["energy_method"] == "block:reused"
    assert info["energy_block_calls"] == 80  # 2 s of 25-ms steps
    assert info["energy_window_s"] == pytest.approx(2.0)
    assert info["energy_counter_updates"] == 20
    assert info["energy_timed_s"] == pytest.approx(2.0)  # the block holds the steps only
    # The start waits for an update, the end misses less than one: low by < one update.
    low = TRUE_J_PER_TOK - QUANTUM_J_PER_TOK
    assert low - 1e-9 <= info["decode_j_per_tok"] <= TRUE_J_PER_TOK + 1e-9
    assert info["gpu_power_w_mean"] == pytest.approx(STEP_W, rel=PERIOD_S / 2.0)


def test_fake_the_setup_is_not_charged_however_much_it_draws():
    # The restore runs before the block, and the counter's first read waits for an update
    # after it: a 700-W setup costs the decode figure nothing against a 120-W one.
    cool = decode_block(Timeline(), restore_w=RESTORE_W)
    hot = decode_block(Timeline(), restore_w=700.0)
    assert hot["decode_j_per_tok"] == pytest.approx(cool["decode_j_per_tok"], rel=1e-12)
    # Before: the window around the rounds charged its mean power (restores included) for the
    # timed seconds: (120 W x 0.3 s + 400 W x 25 ms) / 0.325 s x 25 ms / 8 = 0.44 J/token, 2.8x
    # low. A window around the rounds now makes no per-token figure at all.
    timeline = Timeline()
    meter = gpu_meter(timeline)
    step, restore = decode_fakes(timeline)
    meter.start()
    for _ in range(8):
        step(restore())
    rounds = {"measurement": "decode", **meter.stop()}
    rounds.update(phase_energy_fields(rounds, [STEP_S] * 8, CELL))
    assert rounds["energy_window_j"] is not None  # 2.6 s: the counter resolves it
    assert rounds["decode_j_per_tok"] is None
    assert "setup" in rounds["energy_reason"]
    assert rounds["energy_timed_s"] == pytest.approx(8 * STEP_S)


def test_fake_a_prefill_block_prepares_every_input_before_the_counter_is_read():
    log: list[str] = []
    timeline = Timeline()
    meter = gpu_meter(timeline)

    def prepare() -> int:
        log.append("prepare")
        timeline.spend(0.002, 150.0)  # the prompt's H2D copy, a static reset
        return len(log)

    def prefill(ids: int) -> None:
        log.append(f"prefill {ids}")
        timeline.spend(0.3, 650.0)

    def timer() -> float:
        log.append("sync")
        return timeline.clock()

    meter.block_for({"measurement": "prefill"}, prefill, prepare, call_s=0.3, timer=timer)
    meter.start()
    info = {"measurement": "prefill", **meter.stop()}
    info.update(phase_energy_fields(info, None, CELL))
    calls = block_calls(0.3)
    assert (calls, info["energy_block_calls"]) == (7, 7)
    first_sync = log.index("sync")
    assert log[:first_sync] == ["prepare"] * calls  # every input, before the window
    assert [e for e in log[first_sync:] if e != "sync"] == [f"prefill {i}" for i in range(1, 8)]
    true = 650.0 * 0.3 / (BATCH * 4096)
    assert true * (1 - PERIOD_S / 2.1) - 1e-12 <= info["prefill_j_per_tok"] <= true + 1e-12


def test_a_block_gets_no_body_without_a_counter_and_says_why():
    made: list[int] = []

    def make() -> Block:
        made.append(1)
        return Block("block:reused", 80, lambda: 0.0)

    meter = RoundsMeter(
        torch.device("cpu"), open_counter=lambda *_a, **_k: EnergyUnavailable("no RAPL")
    )
    meter.block(make, lambda: 0.0, "block:reused")
    meter.start()
    info = meter.stop()
    assert made == []  # nothing prepared, nothing run: no cost without a counter
    assert (info["energy_method"], info["energy_reason"]) == ("block:reused", "no RAPL")
    assert info["energy_window_j"] is None


def test_fake_a_decode_block_stops_where_the_cells_cache_ends_and_says_so():
    # N = 32: one restored cache holds 31 steps past P (a static cache is sized P + N - 1);
    # 31 x 25 ms is 0.775 s, under the 1 s the counter needs: no figure, and why.
    assert plan_calls("reused", {"new_tokens": 32}, STEP_S)[0] == 31
    timeline = Timeline()
    small = {**CELL, "new_tokens": 32}
    meter = gpu_meter(timeline, small)
    step, restore = decode_fakes(timeline)
    meter.block_for({"measurement": "decode"}, step, restore, call_s=STEP_S, timer=timeline.clock)
    meter.start()
    info = meter.stop()
    assert info["energy_block_calls"] == 31
    assert info["energy_window_j"] is None
    assert "N - 1 = 31 decode step(s) past P" in info["energy_reason"]
    assert plan_calls("reused", {}, STEP_S)[0] == 1  # no N: only the timed step is known to fit
    assert plan_calls("prepared", {}, STEP_S) == (80, None)


def test_fake_prefill_inputs_sharing_a_cache_run_their_setup_in_the_block_and_time_it():
    # A static cache is one object reset by every setup: prepared ahead, the second prefill
    # would write past its end (5.x takes no cache_position). Each setup runs before its call.
    timeline = Timeline()
    live_cache = object()
    log: list[str] = []

    def prepare() -> tuple[int, object]:
        log.append("reset")
        timeline.spend(0.004, 150.0)
        return len(log), live_cache

    def prefill(state: tuple[int, object]) -> None:
        log.append("prefill")
        timeline.spend(0.1, 600.0)

    meter = gpu_meter(timeline)
    meter.block_for({"measurement": "prefill"}, prefill, prepare, call_s=0.1, timer=timeline.clock)
    meter.start()
    info = {"measurement": "prefill", **meter.stop()}
    info.update(phase_energy_fields(info, None, CELL))
    assert info["energy_method"] == "block:interleaved"
    assert log[:2] == ["reset", "reset"]  # the two probes, then one reset per prefill
    assert log[2:] == ["reset", "prefill"] * 20
    assert info["energy_block_setup_s"] == pytest.approx(20 * 0.004)
    assert info["prefill_j_per_tok"] is not None  # 4 % setup: under the 10 % bound
    # A 20-ms setup per 100-ms prefill: the block is a sixth setup, no figure.
    slow_timeline = Timeline()
    slow = gpu_meter(slow_timeline)

    def slow_prepare() -> tuple[int, object]:
        slow_timeline.spend(0.02, 150.0)
        return 0, live_cache

    def slow_prefill(state: tuple[int, object]) -> None:
        slow_timeline.spend(0.1, 600.0)

    info = {"measurement": "prefill"}
    slow.block_for(info, slow_prefill, slow_prepare, call_s=0.1, timer=slow_timeline.clock)
    slow.start()
    mostly_setup = slow.stop()
    assert mostly_setup["energy_window_j"] is None
    assert "mostly setup" in mostly_setup["energy_reason"]


def test_a_rapl_window_follows_the_same_rule(tmp_path: Path):
    # RAPL updates every ~1 ms, but no window under ENERGY_MIN_WINDOW_S is metered either.
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "name").write_text("package-0")
    (pkg / "max_energy_range_uj").write_text("262143328850")
    for window_s, expected in ((0.5, None), (2.0, 30.0)):
        (pkg / "energy_uj").write_text("5000000")
        meter = RoundsMeter(
            torch.device("cpu"),
            open_counter=partial(open_energy, system="Linux", powercap_root=tmp_path),
            clock=iter([0.0, window_s]).__next__,
        )
        meter.start()
        (pkg / "energy_uj").write_text("35000000")  # 30 J
        info = meter.stop()
        assert info["energy_window_j"] == expected
        assert info["energy_counter_period_s"] == 0.001


def test_a_powermetrics_window_follows_the_same_rule():
    class Process:
        def send_signal(self, _sig: int) -> None:
            pass

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            del timeout
            return "*** Sampled system activity (x) (100.00ms elapsed) ***\nCPU Power: 900 mW\n", ""

    sampler = PowermetricsSampler(
        "cpu", popen=lambda *_a, **_k: Process(), clock=iter([0.0, 0.5]).__next__
    )
    meter = RoundsMeter(
        torch.device("mps"), open_counter=lambda *_a, **_k: sampler, clock=iter([0.0, 0.5]).__next__
    )
    meter.start()
    info = meter.stop()
    assert info["energy_window_j"] is None  # 0.5 s of 100-ms samples: 5, not 10
    assert info["energy_counter_period_s"] == pytest.approx(0.1)
    assert "powermetrics:cpu: a 0.500-s window spans 5 update(s)" in info["energy_reason"]


def test_block_calls_fill_the_target_and_are_capped():
    assert block_calls(0.025) == 80
    assert block_calls(5.0) == 1  # one call longer than the target is the block
    assert block_calls(1e-6) == block_calls(0.0) == ENERGY_BLOCK_MAX_CALLS


def test_blocks_prepare_before_they_run_and_keep_no_output():
    log: list[str] = []
    made = iter(range(3))
    block = make_block("prepared", lambda x: log.append(f"run {x}"), lambda: next(made), 3, float)
    assert (block.method, block.calls, log) == ("block:prepared", 3, [])  # made, none run yet
    assert next(made, "all made") == "all made"
    assert block.body() == 0.0
    assert log == ["run 0", "run 1", "run 2"]
    restored: list[int] = []
    reused = make_block(
        "reused", lambda x: log.append(f"step {x}"), lambda: restored.append(1) or 7, 2, float
    )
    reused.body()
    assert restored == [1]
    assert log[-2:] == ["step 7", "step 7"]
    with pytest.raises(ValueError, match="unknown block inputs"):
        make_block("restored", lambda x: x, None, 1, float)
