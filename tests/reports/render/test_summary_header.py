"""summary.md's header (and with it the CI job summary, which concatenates the shards'
summary.md files): every combination of the per-machine bullets renders each bullet on a line
of its own, after a blank line that ends the machine's sentence (issue 46: a stack change ran
into the consistency bullet, "`transformers` 5.24.0 → 5.25.0- :balance_scale: ...")."""

from __future__ import annotations

import itertools
from dataclasses import replace

from reports.analysis.accuracy import Accuracy
from reports.analysis.attribution import Attribution
from reports.analysis.consistency import ConsistencyRow
from reports.analysis.flags import Drift, DriftRow
from reports.analysis.lean import Lean
from reports.analysis.series import AnalysisConfig, Verdict
from reports.analysis.shift import SuiteShift
from reports.history.load import History, Run
from reports.history.selection import Selection, StackChange
from reports.render.headline import EarlierRun
from reports.render.html import TEMPLATES, render_summary
from reports.render.report import MachineReport, build_report

FULLNAME = "benchmarks/test_decode.py::test_decode[tiny-llama-cpu-float32-b1-p128-n16]"
SLOW = Verdict("m", FULLNAME, "decode_step_s", "timing", "inconclusive", 0.05, ratio=1.2)
ODD = Verdict("m", FULLNAME, "decode_step_s", "timing", "inconclusive", 0.05, ratio=4.0)
# Every machine below has one failed timing: the bisect bullet shows once a baseline commit is
# known (a different commit from the current run's).
FAILED = Verdict("m", FULLNAME, "decode_step_s", "timing", "fail", 0.05, ratio=1.3)

# Each header bullet: the MachineReport fields that make it show, and how its line starts.
BULLETS: dict[str, tuple[dict[str, object], str]] = {
    "stack": (
        {"stack_change": (StackChange("transformers", "5.24.0", "5.25.0"),)},
        "- :arrows_counterclockwise: **Software stack changed**",
    ),
    "busy": ({"busy_cpu_pct": 44.0}, "- :hourglass: **Busy machine**"),
    "shift": (
        {
            "shift": Attribution(
                "m",
                SuiteShift(0.1, 0.01, 0.0001, 0.0001, 12, True, 1.08, 1.13),
                None,
                "common",
                0.0001,
                20.0,
                0.0,
            )
        },
        "- :left_right_arrow: **Machine or code**",
    ),
    "lean": (
        {"lean": Lean("m", 0.001, 12, (SLOW,), runs=20)},
        "- :scales: **Leaning to a slowdown**",
    ),
    "pooled": (
        {"earlier": (EarlierRun("2026-12-01T12:00:00", "fail", 3),)},
        "- :repeat: **Pooled**",
    ),
    "implausible": ({"verdicts": (ODD, FAILED)}, "- :mag: **Implausible changes**"),
    "accuracy": (
        {
            "accuracy_flags": (
                Accuracy("tiny-llama-q", "int8wo", "none", 3.2, 0.4, 16, 0.5, 0.8, True),
            )
        },
        "- :triangular_flag_on_post: **Accuracy outside the bound**",
    ),
    "drift": (
        {"drifts": (DriftRow("m", FULLNAME, "decode_step_s", Drift(0.35, 0.005, 60, 0), "abc"),)},
        "- :chart_with_upwards_trend: **Drift**",
    ),
    "consistency": (
        {"consistency": (ConsistencyRow("c", "decode", 0.1, 0.11, 1.1, 0.2, 5, 5),)},
        "- :balance_scale: **Consistency**",
    ),
    "removed": ({"removed": ("gone",)}, "- Not judged (no longer planned)"),
    "bisect": ({"baseline_commit": "b" * 40}, "- :mag_right: **Which commit did it**"),
}


def _render(bullets: tuple[str, ...], partial: bool, fallback: bool) -> str:
    stack = {"pytorch_enable_mps_fallback": "1"} if fallback else {}
    run = Run("m", "machine", "c" * 40, "pr", False, "2026-12-01", {}, ("f.json",), {}, 0, stack)
    fields: dict[str, object] = {"partial": partial}
    for name in bullets:
        fields.update(BULLETS[name][0])
    machine = replace(
        MachineReport(
            "m", "machine", run, 5, "5 runs", 6, (FAILED,), (), (), (), (), (), (), (), {}
        ),
        **fields,
    )
    empty = build_report(History({}, ()), Selection((), ()), AnalysisConfig())
    report = replace(empty, machines=(machine,), status="inconclusive", status_reason="why")
    return render_summary(report, "now")


def test_every_combination_of_header_bullets_puts_each_on_its_own_line():
    names = tuple(BULLETS)
    for partial, fallback in itertools.product((False, True), repeat=2):
        for count in range(len(names) + 1):
            for shown in itertools.combinations(names, count):
                text = _render(shown, partial, fallback)
                lines = text.splitlines()
                starts = [i for i, line in enumerate(lines) if line.startswith("- ")]
                assert len(starts) == len(shown), (shown, partial, fallback, text[:1500])
                for name, i in zip(shown, starts, strict=True):  # in the template's order
                    assert lines[i].startswith(BULLETS[name][1]), (shown, lines[i])
                    assert "- :" not in lines[i][2:], lines[i]  # no second bullet run in
                    assert "- Not judged" not in lines[i][2:], lines[i]
                if starts:  # the machine's sentence, then a blank line, then the list
                    assert lines[starts[0] - 1] == "", (shown, partial, fallback)
                    assert lines[starts[0] - 2].startswith("**machine**"), lines[starts[0] - 2]
                    assert starts == list(range(starts[0], starts[0] + len(starts)))


def test_every_bullet_of_the_template_is_covered_here():
    """A bullet added to the header must be added to BULLETS, or the test above claims too much."""
    template = (TEMPLATES / "summary.md.j2").read_text(encoding="utf-8")
    header = template.split("{% for m in report.machines %}", 1)[1].split("\n{% endfor %}", 1)[0]
    bullets = [line for line in header.splitlines() if line.startswith("- ")]
    assert len(bullets) == len(BULLETS)
    for line, (_, start) in zip(bullets, BULLETS.values(), strict=True):
        assert line.startswith(start), line
