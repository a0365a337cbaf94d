"""Spec of the OpenMP wait policy the root `conftest.py` sets before torch loads.

Spinning OpenMP workers collapse a round 4-20x when another process takes a core of a small
machine (docs/suite.md, "Threads"); the policy is read once, when torch loads libgomp, so the
root conftest sets it at import, before anything imports torch, unless the user chose one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import os, runpy, sys\n"
    "{before}\n"
    "runpy.run_path({conftest!r})\n"
    "print(os.environ.get('OMP_WAIT_POLICY'))\n"
)


def policy_after_loading_the_conftest(env_policy: str | None, *, torch_first: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    code = PROBE.format(
        before="import torch" if torch_first else "", conftest=str(ROOT / "conftest.py")
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_default_is_passive():
    assert policy_after_loading_the_conftest(None, torch_first=False) == "PASSIVE"


def test_the_users_policy_wins():
    assert policy_after_loading_the_conftest("ACTIVE", torch_first=False) == "ACTIVE"


def test_too_late_to_set_once_torch_is_loaded_so_it_is_not_claimed():
    assert policy_after_loading_the_conftest(None, torch_first=True) == "None"
