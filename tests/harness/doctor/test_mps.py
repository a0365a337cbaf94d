"""Apple machines: the CPU-fallback variable, and pmset's power and thermal state (canned)."""

from __future__ import annotations

from benchmarks.harness.doctor import mps

PMSET_G = "System-wide power settings:\nCurrently in use:\n lowpowermode         1\n sleep 1\n"
BATT = "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1)\t80%; discharging;\n"
AC = "Now drawing from 'AC Power'\n"
THERM = "Note: No thermal warning level has been recorded\nCPU_Speed_Limit \t= 70\n"


def runner(outputs):
    return lambda argv: outputs.get(" ".join(argv))


def test_the_mps_fallback_variable_makes_mps_results_untrustworthy():
    found = mps.check_mps_fallback({"PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    assert found.level == "bad"
    assert "unset PYTORCH_ENABLE_MPS_FALLBACK" in found.action
    assert mps.check_mps_fallback({}).level == "ok"
    assert mps.check_mps_fallback({"PYTORCH_ENABLE_MPS_FALLBACK": "0"}).level == "ok"


def test_low_power_mode_and_battery_warn_and_a_thermal_speed_limit_is_bad():
    run = runner({"pmset -g": PMSET_G, "pmset -g batt": BATT, "pmset -g therm": THERM})
    low, power, thermal = mps.macos_checks(run)
    assert (low.level, power.level, thermal.level) == ("warn", "warn", "bad")
    assert "70 %" in thermal.message
    assert mps.check_power_source(runner({"pmset -g batt": AC})).level == "ok"


def test_without_pmset_every_macos_check_is_skipped():
    assert [f.level for f in mps.macos_checks(runner({}))] == ["skip", "skip", "skip"]
