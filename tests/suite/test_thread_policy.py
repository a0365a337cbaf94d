"""Spec: the suite leaves OpenMP's wait policy as the user's process has it (issue 33).

A root `conftest.py` that set `OMP_WAIT_POLICY=PASSIVE` before torch loaded made every CPU
figure 1.5-2x slower than a default torch process on a Xeon VM, and made the figure depend on
whether something imported torch first (then the setting came too late). So the conftest sets
neither the policy nor `GOMP_SPINCOUNT`; what the user set stays, and is recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import os, runpy, sys\n"
    "{before}\n"
    "runpy.run_path({conftest!r})\n"
    "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))\n"
)
WAIT_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def env_after_loading_the_conftest(user_env: dict[str, str], *, torch_first: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k not in WAIT_ENV}
    env.update(user_env)
    code = PROBE.format(
        before="import torch" if torch_first else "", conftest=str(ROOT / "conftest.py")
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.parametrize("torch_first", [False, True])
def test_the_suite_sets_no_wait_policy_whoever_loads_torch_first(torch_first):
    assert env_after_loading_the_conftest({}, torch_first=torch_first) == "None None"


def test_the_users_policy_and_spin_count_stay():
    user = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}
    assert env_after_loading_the_conftest(user, torch_first=False) == "PASSIVE 10000"
