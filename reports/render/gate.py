"""The gate's console output and exit code (DESIGN §6): what `python -m reports gate` prints.

`gate_lines` writes one line per failing or missing metric and per failing group move (the
whole suite or one metric moving beyond the threshold with the host probes steady), then the
lines a human must look at (`headline.attention_lines`: BUSY, SHIFT with the probes' ratio,
LEAN, ...), the skipped files and the status; `gate_exit_code` maps the status to the exit code.

Deliberately not here: judging (`analysis`), the report model (`report`), argument parsing
(`reports.cli`).
"""

from __future__ import annotations

from reports.render.headline import attention_lines
from reports.render.report import Report

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
#: Nothing could be decided (every timing inconclusive) or the machine was busy: not a pass.
EXIT_INCONCLUSIVE = 3


def gate_lines(report: Report) -> list[str]:
    """The gate's console output: one line per failing or missing metric, then skips and status.

    A failing line names the one-sided test's evidence (interval, Holm-adjusted p) and, when the
    machine's software stack changed against its baseline, every changed field.
    """
    lines: list[str] = []
    for machine, v in report.ranked(("fail",)):
        if v.ci_low is not None and v.ci_high is not None and v.p_adjusted is not None:
            low, high = v.ci_low - 1, v.ci_high - 1
            interval = f" (95% CI {low:+.1%} .. {high:+.1%}, Holm p={v.p_adjusted:.2g})"
        else:
            interval = f" ({v.note})"
        stack = f" [stack: {v.stack_change}]" if v.stack_change else ""
        lines.append(
            f"FAIL {v.fullname} {v.metric}: {(v.ratio or 0) - 1:+.1%}{interval}, "
            f"threshold {v.threshold:.1%} [{machine.label} {v.machine_id}]{stack}"
        )
    lines += group_fail_lines(report)
    for machine, v in report.ranked(("missing",)):
        lines.append(
            f"MISSING {v.fullname} {v.metric}: in the baseline, not in the current run "
            f"[{machine.machine_id}]"
        )
    for machine in report.machines:
        if machine.partial:
            lines.append(
                f"PARTIAL {machine.machine_id}: the current run was killed before it ended"
            )
        for name in machine.removed:
            lines.append(f"removed {name}: no longer in the current run's planned cells")
    for machine in report.machines:
        lines += attention_lines(machine)
    for skipped in report.skipped:
        lines.append(f"SKIPPED {skipped.path}: {skipped.reason}")
    for path in report.suspect_current:
        lines.append(f"ERROR {path} is unreadable and may be the current run")
    counts = ", ".join(f"{n} {k}" for k, n in report.counts.items() if n)
    lines.append(
        f"gate: {report.status.upper()}: {report.status_reason} ({counts or 'no verdicts'})"
    )
    return lines


def group_fail_lines(report: Report) -> list[str]:
    """One line per failing group move (the suite, or every timing of one metric) of a quiet
    machine."""
    lines = []
    for machine in report.machines:
        for g in machine.shift.groups if machine.shift and not machine.busy_text else ():
            if g.verdict == "fail":
                lines.append(
                    f"FAIL {g.fullname} on {machine.machine_id}: {(g.ratio or 0) - 1:+.1%} "
                    f"(95% CI {(g.ci_low or 0) - 1:+.1%} .. {(g.ci_high or 0) - 1:+.1%}), "
                    f"threshold {g.threshold:.1%} [{machine.label}]"
                )
    return lines


def gate_exit_code(report: Report, require_baseline: bool) -> int:
    """0 pass or no-baseline, 1 fail, 2 error, 3 inconclusive (nothing decided, or a busy
    machine: never a pass); no-baseline is 2 with `--require-baseline`."""
    if report.status == "no-baseline":
        return EXIT_BAD_INPUT if require_baseline else EXIT_OK
    return {
        "pass": EXIT_OK,
        "fail": EXIT_FAIL,
        "error": EXIT_BAD_INPUT,
        "inconclusive": EXIT_INCONCLUSIVE,
    }[report.status]
