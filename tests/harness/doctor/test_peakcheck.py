"""Measured peaks against the datasheet: far below it warns, and the quick budget is short."""

from __future__ import annotations

import torch

from benchmarks.harness.doctor import peakcheck
from benchmarks.harness.roofline.peaks import Peaks, lookup_table


def measured(flop_per_s, bandwidth_bytes_per_s):
    def measure(device, dtype, policy):
        assert policy.budget_s <= peakcheck.QUICK_BUDGET_S  # the doctor takes seconds
        return Peaks(flop_per_s, bandwidth_bytes_per_s, "measured:copy/linear", "bfloat16")

    return measure


def h200(device, dtype):
    return lookup_table("NVIDIA H200", dtype)


def test_a_gpu_far_below_its_datasheet_warns_and_one_near_it_is_ok(monkeypatch):
    # No CUDA here: the policy (free GPU memory) is the CPU's; the fake measure ignores it.
    cpu_policy = peakcheck.policy_for(torch.device("cpu"), full=False)
    monkeypatch.setattr(peakcheck, "policy_for", lambda device, full: cpu_policy)
    cuda = torch.device("cuda", 0)
    slow = peakcheck.check_peaks(
        cuda, torch.bfloat16, measure=measured(200e12, 1.0e12), lookup=h200
    )
    assert [f.level for f in slow] == ["warn", "warn"]
    assert "21% of the datasheet's 4,800.00 GB/s" in slow[0].message
    fast = peakcheck.check_peaks(
        cuda, torch.bfloat16, measure=measured(700e12, 4.2e12), lookup=h200
    )
    assert [f.level for f in fast] == ["ok", "ok"]
    assert "TFLOP/s" in fast[1].message


def test_a_cpu_has_no_datasheet_row_and_reports_what_it_measured():
    found = peakcheck.check_peaks(
        torch.device("cpu"), torch.float32, measure=measured(30e9, 4e9), lookup=lambda d, t: None
    )
    assert [f.level for f in found] == ["ok", "ok"]
    assert "30.00 GFLOP/s measured (no datasheet row)" in found[1].message


def test_full_keeps_the_suites_budget_and_quick_cuts_it():
    cpu = torch.device("cpu")
    assert peakcheck.policy_for(cpu, full=False).budget_s == peakcheck.QUICK_BUDGET_S
    assert peakcheck.policy_for(cpu, full=True).budget_s > peakcheck.QUICK_BUDGET_S
    assert peakcheck.default_dtype(cpu) == torch.float32
