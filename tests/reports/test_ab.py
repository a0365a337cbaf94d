"""`reports.ab`: paired verdicts from two sides' JSON, ab.json (schema 1), HTML, Markdown, exits."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from reports import ab
from reports.ab import ABConfig, judge, status_of
from reports.history.runfile import BenchmarkResult
from reports.render.ab import ab_bisect_commands, render_html, render_summary, strip_points

MACHINE = {"node": "n", "system": "Linux", "release": "6", "machine": "x86_64",
           "python_implementation": "CPython"}  # fmt: skip


def bench_json(name: str, rounds: list[float], *, measurement: str, kv: int = 4096) -> dict:
    return {
        "group": measurement,
        "name": f"test_{measurement}[{name}]",
        "fullname": f"benchmarks/test_{measurement}.py::test_{measurement}[{name}]",
        "params": {"model": name},
        "param": name,
        "extra_info": {
            "schema": 1,
            "cell_id": name,
            "measurement": measurement,
            "kv_measured_after_prefill_bytes": kv,
            "weights_bytes": 1000,
            "ttft_s": 0.001,
        },
        "options": {},
        "stats": {"data": rounds, "median": sorted(rounds)[len(rounds) // 2]},
    }


def side_file(path: Path, benches: list[dict]) -> Path:
    doc = {"machine_info": MACHINE, "commit_info": {"id": "abc", "branch": "main"},
           "benchmarks": benches, "datetime": "2026-12-01T00:00", "version": "5.3.1"}  # fmt: skip
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def rounds(seed: int, shift: float, n: int = 30) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    base, head = [], []
    for _ in range(n):
        shared = 0.01 * math.exp(rng.gauss(0, 0.3))
        base.append(shared * math.exp(rng.gauss(0, 0.01)))
        head.append(shared * (1 + shift) * math.exp(rng.gauss(0, 0.01)))
    return base, head


def results(benches: list[dict]) -> dict[str, BenchmarkResult]:
    return {b["fullname"]: BenchmarkResult.from_json(b) for b in benches}


def test_a_slowed_head_fails_and_an_unchanged_one_passes():
    b1, h1 = rounds(1, 0.10)
    b2, h2 = rounds(2, 0.0)
    base = [bench_json("a", b1, measurement="decode"), bench_json("b", b2, measurement="prefill")]
    head = [bench_json("a", h1, measurement="decode"), bench_json("b", h2, measurement="prefill")]
    entries = judge(results(base), results(head), ABConfig())
    timing = {e.metric: e for e in entries if e.kind == "timing"}
    assert timing["decode_step_s"].verdict == "fail"
    assert timing["decode_step_s"].ratio == pytest.approx(1.10, abs=0.01)
    assert timing["decode_step_s"].ci_low < 1.10 < timing["decode_step_s"].ci_high
    assert timing["decode_step_s"].pairs == 30
    assert timing["prefill_s"].verdict == "pass"
    assert timing["prefill_s"].mde is not None
    assert timing["prefill_s"].mde > 0.05
    assert all(e.verdict == "pass" for e in entries if e.kind == "exact")
    assert not any(e.metric == "ttft_s" for e in entries)  # one value per side: not judged
    assert status_of(entries)[0] == "fail"


def test_kv_bytes_are_compared_exactly_and_one_sided_cells_are_new_or_missing():
    b, h = rounds(3, 0.0)
    base = [bench_json("a", b, measurement="decode"), bench_json("gone", b, measurement="decode")]
    head = [
        bench_json("a", h, measurement="decode", kv=4097),
        bench_json("new", h, measurement="decode"),
    ]
    entries = judge(results(base), results(head), ABConfig())
    by = {(e.fullname.split("[")[1][:-1], e.metric): e for e in entries}
    kv = by[("a", "kv_measured_after_prefill_bytes")]
    assert kv.verdict == "fail"
    assert "grew by 1" in kv.note
    assert by[("gone", "decode_step_s")].verdict == "missing"
    assert by[("new", "decode_step_s")].verdict == "new"
    status, reason = status_of(entries)
    assert status == "fail"
    assert "missing" in reason


def test_no_benchmark_in_common_is_an_error():
    b, h = rounds(4, 0.0)
    entries = judge(results([bench_json("x", b, measurement="decode")]),
                    results([bench_json("y", h, measurement="decode")]), ABConfig())  # fmt: skip
    assert status_of(entries)[0] == "error"


def test_cli_writes_schema_1_json_html_and_markdown_with_exit_codes(tmp_path):
    b, h = rounds(5, 0.10)
    side_file(tmp_path / "base.json", [bench_json("a", b, measurement="generate")])
    side_file(tmp_path / "head.json", [bench_json("a", h, measurement="generate")])
    context = {"pairs": 30, "interleave": "rounds", "sides": {
        "base": {"label": "main", "commit": "1" * 40, "env": {}, "stack": {"torch": "2.13"}},
        "head": {"label": "<working tree>", "commit": None, "env": {"OMP_NUM_THREADS": "1"},
                 "stack": {"torch": "2.14"}}}}  # fmt: skip
    (tmp_path / "context.json").write_text(json.dumps(context), encoding="utf-8")
    assert ab.main(["--out", str(tmp_path)]) == 1
    doc = json.loads((tmp_path / "ab.json").read_text(encoding="utf-8"))
    assert doc["schema"] == 1
    assert doc["status"] == "fail"
    entry = next(e for e in doc["benchmarks"] if e["metric"] == "e2e_s")
    for field in (
        "fullname",
        "metric",
        "verdict",
        "ratio",
        "ci_low",
        "ci_high",
        "mde",
        "threshold",
        "pairs",
    ):
        assert field in entry
    html = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "&lt;working tree&gt;" in html  # escaped
    assert '<svg class="pairs"' in html
    assert 'class="changed"' in html  # torch differs between the stacks
    md = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "FAIL" in md
    assert "`e2e_s`" in md
    # a higher threshold turns the same data into a pass
    assert ab.main(["--out", str(tmp_path), "--threshold", "20%"]) == 0


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "base.json").write_text("{not json", encoding="utf-8")
    side_file(tmp_path / "head.json", [])
    assert ab.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "base" in err
    assert ab.main(["--out", str(tmp_path / "nowhere")]) == 2


def test_strip_points_span_pairs_interval_and_threshold():
    entry = {"kind": "timing", "threshold": 0.05, "log_ratios": [0.0, 0.1, -0.1],
             "ci_low": 0.9, "ci_high": 1.2}  # fmt: skip
    svg = strip_points(entry)
    assert svg is not None
    xs = [d["x"] for d in svg["dots"]]
    assert min(xs) >= 0
    assert max(xs) <= svg["width"]
    assert svg["dots"][1]["x"] > svg["zero"] > svg["dots"][2]["x"]
    assert strip_points({"kind": "exact", "threshold": 0.05}) is None


def test_render_handles_an_error_document():
    doc = ab.ab_json([], ABConfig(), {})
    assert doc["status"] == "error"
    assert "ERROR" in render_html(doc)
    assert "ERROR" in render_summary(doc)


def test_the_header_names_the_pairs_the_benchmarks_really_had():
    """The time budget stops long rounds early: the page says 20-100, not the most asked for."""
    from reports.render.ab import pairs_text  # noqa: PLC0415

    timing = [{"kind": "timing", "pairs": n} for n in (100, 20, 41)]
    assert pairs_text([*timing, {"kind": "exact", "pairs": 0}]) == "20-100 pairs"
    assert pairs_text([{"kind": "timing", "pairs": 30}] * 2) == "30 pairs"
    assert pairs_text([]) == "no pairs"


def test_rejudging_uses_the_recorded_process_term_and_process_interleave_has_a_floor():
    from reports.ab_settings import process_term  # noqa: PLC0415 - one test's helper
    from reports.analysis.paired import PROCESS_CV, PROCESS_INTERLEAVE_CV  # noqa: PLC0415

    assert process_term(None, {}) == (PROCESS_CV, "")
    assert process_term(None, {"judge": {"process_cv": 0.0}}) == (0.0, "")
    assert process_term(0.02, {"judge": {"process_cv": 0.0}}) == (0.02, "")
    cv, why = process_term(None, {"interleave": "process", "judge": {"process_cv": 0.0}})
    assert cv == PROCESS_INTERLEAVE_CV
    assert "process interleave" in why


def _process_run(tmp_path: Path, seed: int, level_sd: float, shift: float, slowed: int = 40) -> int:
    """A process-interleaved run of 40 benchmarks: each benchmark's two processes differ by a
    random run-level factor (log sd `level_sd`), the head of the first `slowed` benchmarks
    slower by `shift` throughout."""
    rng = random.Random(seed)
    base, head = [], []
    for i in range(40):
        level = math.exp(rng.gauss(0, level_sd)) * (1 + shift if i < slowed else 1.0)
        b = [0.003 * math.exp(rng.gauss(0, 0.05)) for _ in range(100)]
        h = [0.003 * level * math.exp(rng.gauss(0, 0.05)) for _ in range(100)]
        base.append(bench_json(f"m{i}", b, measurement="decode"))
        head.append(bench_json(f"m{i}", h, measurement="decode"))
    side_file(tmp_path / "base.json", base)
    side_file(tmp_path / "head.json", head)
    context = {"interleave": "process", "judge": {"process_cv": 0.0}}
    (tmp_path / "context.json").write_text(json.dumps(context), encoding="utf-8")
    return ab.main(["--out", str(tmp_path)])


def test_process_interleave_carries_the_run_level_spread_it_shows(tmp_path: Path):
    """On the VM, A/A process-interleaved runs scattered 29-41 % across benchmarks and a fixed
    3 % term failed 1-5 timings per run; the term now follows the run's own spread."""
    failed = 0
    for seed in range(10):
        folder = tmp_path / f"aa{seed}"
        folder.mkdir()
        code = _process_run(folder, seed, level_sd=0.3, shift=0.0)
        doc = json.loads((folder / "ab.json").read_text(encoding="utf-8"))
        failed += code == 1
        assert doc["process_cv"] > 0.15
        assert "spread of the two processes' levels" in doc["context"]["process_term"]
    assert failed <= 1  # the issue: <= 1 in 20; a fixed 3 % term fails nearly every run here
    # A quiet machine (1 % run-level spread): the 3 % floor holds, 6 timings 20 % slower fail.
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    assert _process_run(quiet, 11, level_sd=0.01, shift=0.20, slowed=6) == 1
    doc = json.loads((quiet / "ab.json").read_text(encoding="utf-8"))
    assert doc["process_cv"] == pytest.approx(0.03)
    assert doc["counts"]["fail"] == 6


def test_a_process_run_whose_every_timing_moved_together_fails_and_says_the_shift(tmp_path):
    """Issue 41: in A/B mode nothing is re-centred. Both sides ran on this machine, so a move of
    every timing is the head's code unless something measured says otherwise (before: the move
    was subtracted as "one process's window", and 30 % on every timing failed nothing). The
    common shift is still said, with the advice to interleave rounds."""
    assert _process_run(tmp_path, 12, level_sd=0.01, shift=0.30) == 1
    doc = json.loads((tmp_path / "ab.json").read_text(encoding="utf-8"))
    assert doc["counts"]["fail"] == 40
    assert doc["status"] == "fail"
    assert "every timing of the head moved +" in doc["context"]["process_shift"]
    assert "nothing is re-centred" in doc["context"]["process_shift"]


def test_a_failed_timing_between_two_commits_says_how_to_bisect_it(tmp_path):
    b, h = rounds(5, 0.30)
    side_file(tmp_path / "base.json", [bench_json("a", b, measurement="decode")])
    side_file(tmp_path / "head.json", [bench_json("a", h, measurement="decode")])
    sides = {
        "base": {"label": "main", "commit": "1" * 40, "env": {}, "stack": {}},
        "head": {"label": "pr", "commit": "2" * 40, "env": {}, "stack": {}},
    }
    context = {"pairs": 30, "interleave": "rounds", "matrix": "matrix/cpu.yaml", "sides": sides}
    (tmp_path / "context.json").write_text(json.dumps(context), encoding="utf-8")
    assert ab.main(["--out", str(tmp_path)]) == 1
    doc = json.loads((tmp_path / "ab.json").read_text(encoding="utf-8"))
    [(test, command)] = ab_bisect_commands(doc)
    failed = next(e for e in doc["benchmarks"] if e["verdict"] == "fail")
    assert test == failed["fullname"].rpartition("::")[2]
    assert command.startswith(f"nox -s bisect -- --good {'1' * 12} --bad {'2' * 12}")
    assert "--matrix matrix/cpu.yaml" in command
    assert "--metric decode_step_s" in command
    assert command in (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "Which commit did it" in (tmp_path / "index.html").read_text(encoding="utf-8")
    # the working tree as head: no commits between, no command
    sides["head"]["commit"] = None
    assert ab_bisect_commands({**doc, "context": {**context, "sides": sides}}) == []
