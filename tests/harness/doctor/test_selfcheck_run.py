"""`doctor --self-check` end to end on this CPU, its process-per-probe runner on fakes (a
timeout, a death, a crash), and the exit status rule."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.harness import cli
from benchmarks.harness.doctor import run
from benchmarks.harness.doctor.findings import Finding, ok, skip
from benchmarks.harness.doctor.selfcheck import run as selfcheck
from benchmarks.harness.doctor.selfcheck.run import Probe, SelfCheckRequest

LINE = re.compile(r"^(OK|WARN|BAD|SKIP) +[a-z_]+\.[a-z_]+: .+ \| do: .+$")
CPU = torch.device("cpu")


def test_the_self_check_on_this_cpu_measures_its_cpu_parts_and_skips_the_rest(
    tmp_path, monkeypatch, capsys
):
    # The machine checks have their own end-to-end test (test_run.py): here only the probes,
    # each in its own real process.
    monkeypatch.setattr(run, "run_checks", lambda *_a, **_k: [])
    out = tmp_path / "doctor.json"
    status = cli.main(["doctor", "--device", "cpu", "--self-check", "--json", str(out)])
    *lines, summary = capsys.readouterr().out.strip().splitlines()
    assert [line for line in lines if not LINE.match(line)] == []
    data = json.loads(out.read_text())
    found = {f["check"]: f for f in data["findings"]}
    assert len(found) == len(lines)
    steps = found["selfcheck.compile_steps"]
    assert steps["level"] == "ok", steps["message"]  # measured: one graph per compiled step
    assert steps["data"]["compile_graph_breaks"] == 0
    assert steps["data"]["graph_launches_per_decode_step"] == 1
    assert found["selfcheck.greedy_tokens"]["level"] == "ok"  # measured: the same tokens
    assert found["selfcheck.greedy_tokens"]["data"]["tokens_equal"] is True
    fields = found["selfcheck.record_fields"]["data"]
    assert fields["compile_timed_frames"] == 0
    assert "energy_window_s" in fields
    for check in ("cuda_graphs", "throttle_load", "flash_attn_logits"):
        assert found[f"selfcheck.{check}"]["level"] == "skip"  # CUDA only, said why
        assert found[f"selfcheck.{check}"]["message"]
    assert "--self-check --also-transformers " in found["selfcheck.transformers"]["action"]
    assert found["selfcheck.peak_biggest_cell"]["data"]["cell"].startswith("qwen2.5-0.5b-cpu")
    assert "selfcheck.energy_counter" in found  # RAPL where readable, else a skip
    bad = [c for c, f in found.items() if f["level"] == "bad"]
    assert status == data["exit_status"] == (1 if bad else 0)
    assert summary.endswith(f"(exit {status})")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--self-check", "--probe-model", "no-such-model"], "no-such-model"),
        (["--self-check", "--matrix", "no/such.yaml"], "matrix file not found"),
        (["--matrix", "matrix/cpu.yaml"], "--matrix applies to the self-check only"),
        (["--probe-model", "tiny-llama"], "--probe-model applies to the self-check only"),
    ],
)
def test_bad_self_check_input_exits_2_before_any_check(monkeypatch, capsys, args, said):
    monkeypatch.setattr(run, "run_checks", lambda *_a, **_k: pytest.fail("checks ran"))
    assert cli.main(["doctor", "--device", "cpu", *args]) == 2
    assert said in capsys.readouterr().err


def _request() -> SelfCheckRequest:
    return SelfCheckRequest(CPU)


def _probe(name: str = "greedy_tokens", reason: str | None = None) -> Probe:
    return Probe(name, 10.0, 30.0, lambda _r: reason, lambda _r: [])


def _done(stdout: str = "", stderr: str = "", code: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["python"], code, stdout, stderr)


def test_a_probe_that_outlives_its_timeout_is_stopped_and_reported_bad():
    def hang(command, timeout_s):
        raise subprocess.TimeoutExpired(command, timeout_s)

    (found,) = selfcheck.run_probe(_probe(), _request(), timeout_s=30.0, run=hang)
    assert (found.check, found.level) == ("selfcheck.greedy_tokens", "bad")
    assert "did not finish within 30 s" in found.message
    assert "benchmarks.harness.doctor.selfcheck greedy_tokens --device cpu" in found.action


def test_a_probe_process_that_dies_without_findings_is_bad_with_its_last_error_line():
    died = _done(
        stderr="Traceback ...\nRuntimeError: CUDA error: an illegal memory access\n", code=-11
    )
    (found,) = selfcheck.findings_from("cuda_graphs", died)
    assert found.level == "bad"
    assert "exit -11" in found.message
    assert "illegal memory access" in found.message


def test_a_probe_process_hands_its_findings_back_as_one_json_line():
    line = selfcheck.MARKER + json.dumps([ok("selfcheck.x", "fine", n=1).to_json()])
    (found,) = selfcheck.findings_from("x", _done(stdout=f"noise\n{line}\n"))
    assert found == Finding("selfcheck.x", "ok", "fine", data={"n": 1})


def test_a_probe_that_raises_in_its_process_prints_a_bad_finding(monkeypatch, capsys):
    def crash(_request):
        raise RuntimeError("flash-attn kernel failed\nmore")

    monkeypatch.setattr(
        selfcheck, "PROBES", (Probe("flash_attn_logits", 1.0, 2.0, lambda _r: None, crash),)
    )
    assert selfcheck.main(["flash_attn_logits", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith(selfcheck.MARKER)
    (found,) = json.loads(printed[len(selfcheck.MARKER) :])
    assert found["level"] == "bad"
    assert "RuntimeError: flash-attn kernel failed" in found["message"]


def test_a_probe_that_cannot_apply_is_skipped_without_a_process():
    def never(command, timeout_s):
        raise AssertionError("spawned")

    probes = [_probe("cuda_graphs", reason="cpu: CUDA graphs (CUDA only)")]
    (found,) = selfcheck.self_check(_request(), probes=probes, run=never)
    assert found == skip("selfcheck.cuda_graphs", "cpu: CUDA graphs (CUDA only)")


def test_a_probe_without_time_left_in_the_limit_is_not_started():
    now = [0.0]
    line = selfcheck.MARKER + json.dumps([ok("selfcheck.a", "done").to_json()])

    def slow(command, timeout_s):
        assert timeout_s <= selfcheck.LIMIT_S
        now[0] += selfcheck.LIMIT_S - 5.0  # the first probe takes nearly the whole limit
        return _done(stdout=line)

    probes = [_probe("a"), _probe("b")]
    first, second = selfcheck.self_check(_request(), probes=probes, run=slow, clock=lambda: now[0])
    assert first.level == "ok"
    assert (second.check, second.level) == ("selfcheck.b", "warn")
    assert "not run" in second.message


@pytest.mark.parametrize(("level", "status"), [("bad", 1), ("warn", 0), ("skip", 0), ("ok", 0)])
def test_a_bad_self_check_finding_makes_the_doctor_exit_1(monkeypatch, capsys, level, status):
    monkeypatch.setattr(run, "run_checks", lambda *_a, **_k: [ok("cpu.load", "quiet")])
    finding = Finding("selfcheck.cuda_graphs", level, "figures", "the fix")
    monkeypatch.setattr(selfcheck, "self_check", lambda _request: iter([finding]))
    assert cli.main(["doctor", "--device", "cpu", "--self-check"]) == status
    out = capsys.readouterr().out
    assert f"{level.upper():<4} selfcheck.cuda_graphs: figures | do: the fix" in out
    assert out.strip().endswith(f"(exit {status})")


@pytest.mark.parametrize(("job", "device"), [("bench-mps", "mps"), ("bench-cuda", "cuda")])
def test_the_self_hosted_doctor_step_runs_the_self_check_within_its_limit(job, device):
    workflow = Path(__file__).resolve().parents[3] / ".github" / "workflows" / "bench.yml"
    steps = yaml.safe_load(workflow.read_text())["jobs"][job]["steps"]
    step = next(s for s in steps if "nox -s doctor" in s.get("name", ""))
    command = " ".join(step["run"].replace("\\\n", " ").split())
    assert f"nox -s doctor -- --device {device} --self-check --json" in command
    # The step's limit holds the doctor, the nox install and the whole self-check's limit.
    assert step["timeout-minutes"] * 60 >= selfcheck.LIMIT_S + 120


def test_a_cut_short_findings_line_or_a_process_that_cannot_start_is_bad():
    cut = _done(stdout=selfcheck.MARKER + '[{"check": "selfcheck.x", "lev')
    (found,) = selfcheck.findings_from("x", cut)
    assert found.level == "bad"
    assert "unreadable findings" in found.message

    def missing(command, timeout_s):
        raise FileNotFoundError(2, "No such file or directory", command[0])

    (found,) = selfcheck.run_probe(_probe(), _request(), timeout_s=5.0, run=missing)
    assert found.level == "bad"
    assert "could not start" in found.message
