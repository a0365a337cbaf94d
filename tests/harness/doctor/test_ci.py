"""The self-hosted bench jobs run the doctor first, and its exit status stays visible."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

WORKFLOW = Path(__file__).resolve().parents[3] / ".github" / "workflows" / "bench.yml"


@pytest.mark.parametrize(("job", "device"), [("bench-mps", "mps"), ("bench-cuda", "cuda")])
def test_the_doctor_runs_before_anything_is_measured_and_reports_a_non_zero_exit(job, device):
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
    names = [step.get("name", step.get("uses", "")) for step in steps]
    doctor = next(i for i, name in enumerate(names) if "nox -s doctor" in name)
    measuring = [i for i, name in enumerate(names) if "nox -s ab" in name or "nox -s bench" in name]
    assert measuring
    assert doctor < min(measuring)
    step = steps[doctor]
    assert f"nox -s doctor -- --device {device}" in step["run"]
    # Documented choice (docs/doctor.md): the job goes on, the failure is annotated and summarised.
    assert step["continue-on-error"] is True
    assert "::error title=phasebench doctor::" in step["run"]
    assert "GITHUB_STEP_SUMMARY" in step["run"]
    assert 'exit "$status"' in step["run"]
