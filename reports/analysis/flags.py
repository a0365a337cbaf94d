"""What a reader must be told beside the verdicts: a busy machine, an implausible change, drift.

Pure functions on verdicts and plain numbers; `tests/reports/analysis/test_flags.py` checks them.

- **A busy machine** (`BUSY_CPU_PCT`): the benchmark side records `extra_info.other_cpu_pct`,
  the mean CPU use of *other* processes during the timed rounds in percent of the whole
  machine's capacity. A current run where any benchmark saw >= 25 % (a neighbour keeping one
  core of four busy; half a core of a 2-core VM) is disturbed: torch's thread pool collapses
  when a core it counts on is taken, 4-5x on a 2-core VM. Its `fail` and `improved` verdicts
  become `inconclusive` with the reason (`mark_busy`): it is never judged as if quiet, and a
  busy run cannot pass. A benchmark whose window was too short for the CPU counters records
  None (unknown, not busy); the run's windows added up still count (`run_busy_pct`). Files
  without the field are quiet as before.
- **An implausible change** (`IMPLAUSIBLE_RATIO`): a timing 3x slower or faster than its
  baseline more likely means the benchmark stopped (or started) doing its work than that the
  code changed its speed so much; `implausible` says so, for a human to check.
- **Drift** (`drift`): a slow creep that no single comparison fails (0.5 % per run is +35 %
  over 60 runs). Per series, the median of the newest `DRIFT_EDGE_RUNS` locations against
  the median of the oldest as many in the window, and the Theil-Sen slope per run; named when
  the change reaches the threshold.

Deliberately not here: the decision rule, files, formatting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reports.analysis.changepoints import theil_sen_line
from reports.analysis.levels import common_rounds, location_at
from reports.analysis.metrics import higher_is_better, primary_metric
from reports.analysis.probes import BUSY_SHARE
from reports.analysis.series import Verdict
from reports.history.load import Run
from reports.history.selection import Comparison

#: A current run whose benchmarks saw other processes use this share of the CPU is busy (the
#: host probes' points use the same share: `probes.BUSY_SHARE`).
BUSY_CPU_PCT = 100.0 * BUSY_SHARE
#: A change of this factor or more, either way, is flagged for a human.
IMPLAUSIBLE_RATIO = 3.0
#: Runs at each end of the window whose median is compared for drift.
DRIFT_EDGE_RUNS = 5
#: The newest runs (baseline and current) over which drift is measured.
DRIFT_WINDOW_RUNS = 60


def busy_cpu_pct(other_cpu_pcts: Sequence[float | None]) -> float | None:
    """The run's busiest benchmark's `other_cpu_pct`, when it reaches `BUSY_CPU_PCT`, else None."""
    known = [p for p in other_cpu_pcts if p is not None and math.isfinite(p)]
    if not known or max(known) < BUSY_CPU_PCT:
        return None
    return max(known)


def busy_reason(pct: float) -> str:
    """The reason a busy run's verdicts are not decided."""
    return f"machine busy (other processes used {pct:.0f} % of the CPU)"


def mark_busy(verdicts: Sequence[Verdict], busy: Mapping[str, float]) -> list[Verdict]:
    """Noisy `fail`/`improved` verdicts of a busy machine become `inconclusive` with the reason.

    `busy` maps machine_id to the busy share (`busy_cpu_pct`); exact byte counts are not timed
    and keep their verdicts.
    """
    out = []
    for v in verdicts:
        pct = busy.get(v.machine_id)
        if pct is not None and v.kind != "exact" and v.verdict in ("fail", "improved"):
            note = "; ".join(n for n in (busy_reason(pct), f"would be {v.verdict}", v.note) if n)
            out.append(replace(v, verdict="inconclusive", note=note))
        else:
            out.append(v)
    return out


def implausible(v: Verdict) -> bool:
    """True for a timed change of `IMPLAUSIBLE_RATIO` or more either way (not exact bytes)."""
    if v.kind == "exact" or v.ratio is None or v.ratio <= 0:
        return False
    return abs(math.log(v.ratio)) >= math.log(IMPLAUSIBLE_RATIO)


def implausible_text(v: Verdict) -> str:
    """The human's instruction for an implausible change."""
    ratio = v.ratio or 1.0
    how = f"{ratio:.1f}x slower" if ratio > 1 else f"{1 / ratio:.1f}x faster"
    return f"implausible change ({how}): check that the benchmark still does its work"


@dataclass(frozen=True)
class Drift:
    """A series' drift over its window: `rel_change` (newest edge vs oldest edge, a fraction),
    `slope_per_run` (Theil-Sen, fraction per run), `runs` (window length), `since` (index of the
    window's first run in the caller's list)."""

    rel_change: float
    slope_per_run: float
    runs: int
    since: int


def drift(log_values: Sequence[float], threshold: float) -> Drift | None:
    """The drift of a series of log locations (oldest first, the current run last), or None.

    Over the newest `DRIFT_WINDOW_RUNS` values (at least `3 * DRIFT_EDGE_RUNS`): named when the
    median of the newest `DRIFT_EDGE_RUNS` differs from the median of the oldest as many by
    `threshold` or more and the Theil-Sen slope agrees in sign with a total change of at least
    half of that (a creep, not two flat levels with a lone odd run at the end).
    """
    start = max(0, len(log_values) - DRIFT_WINDOW_RUNS)
    window = list(log_values[start:])
    if len(window) < 3 * DRIFT_EDGE_RUNS:
        return None
    change = statistics.median(window[-DRIFT_EDGE_RUNS:]) - statistics.median(
        window[:DRIFT_EDGE_RUNS]
    )
    slope, _ = theil_sen_line(window)  # the change points' own line: one Theil-Sen
    if abs(change) < math.log1p(threshold) or slope * change <= 0:
        return None
    if abs(slope) * (len(window) - 1) < abs(change) / 2:
        return None
    return Drift(math.expm1(change), math.expm1(slope), len(window), start)


@dataclass(frozen=True)
class DriftRow:
    """Drift of one benchmark's primary timing on one machine, since `since_commit`."""

    machine_id: str
    fullname: str
    metric: str
    drift: Drift
    since_commit: str

    @property
    def text(self) -> str:
        """ "+35.0 % over 60 runs since abc1234 (+0.50 % per run)"."""
        d = self.drift
        return (
            f"{d.rel_change:+.1%} over {d.runs} runs since {self.since_commit[:7]} "
            f"({d.slope_per_run:+.2%} per run)"
        )


#: `/proc/stat`'s tick (USER_HZ = 100 on Linux): each window's reading of others' CPU is off by
#: the two reads' truncation of every CPU's idle time, within one tick per CPU.
COUNTER_TICK_S = 0.01
#: Windows added up resolve others' CPU when three standard deviations of their summed
#: truncation errors are at most this share of their capacity (the one-window rule's 5 %).
RESOLVE_SHARE = 0.05


def _number(raw: object) -> float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw):
        return float(raw)
    return None


def run_busy_pct(run: Run) -> float | None:
    """`busy_cpu_pct` over the run's benchmarks: each one's `extra_info.other_cpu_pct` where its
    window resolved it, and the run's windows added up (`integrated_other_cpu_pct`).

    A benchmark whose rounds took milliseconds records None (its counters cannot tell one 10-ms
    tick from a neighbour): it is not busy on its own, but its window still counts in the sum, so
    a neighbour that sat through a run of short benchmarks is seen. Absent fields: quiet.
    """
    values = [
        pct
        for bench in run.benchmarks.values()
        if (pct := _number(bench.extra.get("other_cpu_pct"))) is not None
    ]
    integrated = integrated_other_cpu_pct(run)
    if integrated is not None:
        values.append(integrated)
    return busy_cpu_pct(values)


#: Quiet baseline runs that must remain for busy ones to be left out of the baseline.
MIN_QUIET_BASELINE_RUNS = 2


def quiet_baseline(comparison: Comparison) -> Comparison:
    """The comparison without its busy baseline runs (`run_busy_pct`), when at least
    `MIN_QUIET_BASELINE_RUNS` quiet ones remain: a disturbed run is never a level (nor a step,
    nor a burst the run effects must explain); the baseline rule says how many were left out.
    Otherwise the comparison as it is (a machine that is always busy still has a baseline)."""
    busy = [r for r in comparison.baseline if run_busy_pct(r) is not None]
    quiet = tuple(r for r in comparison.baseline if all(r is not b for b in busy))
    if not busy or len(quiet) < MIN_QUIET_BASELINE_RUNS:
        return comparison
    rule = f"{comparison.baseline_rule}; {len(busy)} busy run(s) left out (never a level)"
    return replace(comparison, baseline=quiet, baseline_rule=rule)


def quiet_repeats(comparison: Comparison) -> Comparison:
    """The comparison with only the re-runs that pass the busy check (`run_busy_pct`) pooled:
    a disturbed re-run is never averaged into the current run's level; the baseline rule says
    how many were left out."""
    busy = [r for r in comparison.current_repeats if run_busy_pct(r) is not None]
    if not busy:
        return comparison
    kept = tuple(r for r in comparison.current_repeats if all(r is not b for b in busy))
    rule = f"{comparison.baseline_rule}; {len(busy)} busy re-run(s) not pooled"
    return replace(comparison, current_repeats=kept, baseline_rule=rule)


def integrated_other_cpu_pct(run: Run) -> float | None:
    """Other processes' share of the machine over all the run's tests together (each test's
    whole window, `others_test_*`, else its timed rounds' window): the sum of others' CPU-s over
    the sum of window x CPUs. None when the windows' summed counter error could reach
    `RESOLVE_SHARE` of that capacity, or the files predate the raw fields (`others_cpu_s`,
    `others_window_s`, `others_cpus`).

    Each window's error is the difference of two truncations per CPU: triangular within one tick,
    standard deviation tick / sqrt(6), independent from window to window; k windows of c CPUs
    sum to tick * sqrt(k c / 6). Sixty 10-ms windows on 2 CPUs (1.2 CPU-s) do not resolve; two
    hundred 20-ms windows (8 CPU-s) do."""
    others_s = capacity_s = cpu_windows = 0.0
    for bench in run.benchmarks.values():
        extra = bench.extra
        # The whole test's window where recorded (build, warmup, rounds: tests span most of a
        # run's wall time), else the timed rounds'.
        whole = "others_test_cpu_s" in extra and "others_test_window_s" in extra
        prefix = "others_test_" if whole else "others_"
        cpu_s = _number(extra.get(f"{prefix}cpu_s"))
        window_s = _number(extra.get(f"{prefix}window_s"))
        cpus = _number(extra.get("others_cpus"))
        if cpu_s is None or window_s is None or cpus is None or cpus <= 0:
            continue
        others_s += cpu_s
        capacity_s += window_s * cpus
        cpu_windows += cpus
    error_s = 3.0 * COUNTER_TICK_S * math.sqrt(cpu_windows / 6.0)
    if capacity_s <= 0 or error_s > RESOLVE_SHARE * capacity_s:
        return None
    return min(max(100.0 * others_s / capacity_s, 0.0), 100.0)


def unresolved_other_cpu(run: Run) -> int:
    """How many of the run's benchmarks recorded others' CPU as unknown (a window too short)."""
    return sum(
        1
        for bench in run.benchmarks.values()
        if "other_cpu_note" in bench.extra and bench.extra.get("other_cpu_pct") is None
    )


def other_cpu_text(run: Run) -> str:
    """What the run's records say of other processes' CPU, for the report's methodology:
    the busiest resolved benchmark, the windows together, and how many windows were too short."""
    pcts = [
        pct
        for bench in run.benchmarks.values()
        if (pct := _number(bench.extra.get("other_cpu_pct"))) is not None
    ]
    integrated = integrated_other_cpu_pct(run)
    unknown = unresolved_other_cpu(run)
    if not pcts and integrated is None and not unknown:
        return "n/a (not recorded)"
    parts = []
    if pcts:
        parts.append(f"at most {max(pcts):.0f} % of the machine in one benchmark")
    if integrated is not None:
        parts.append(f"{integrated:.0f} % over all the run's tests together")
    if unknown:
        parts.append(
            f"unknown in {unknown} benchmark(s) whose rounds were too short for the CPU "
            "counters' 10-ms ticks"
        )
    return "; ".join(parts)


def distinct_extra(run: Run, key: str, names: Mapping[str, str] | None = None) -> str:
    """The distinct values of `extra_info[key]` over the run's benchmarks, comma-separated, each
    replaced by its entry in `names` if it has one; "n/a (not recorded)" when none has the key."""
    values = sorted({str(b.extra[key]) for b in run.benchmarks.values() if key in b.extra})
    words = names or {}
    return ", ".join(words.get(v, v) for v in values) if values else "n/a (not recorded)"


def process_state_rows(run: Run) -> dict[str, str]:
    """The process state the run's rounds ran in, as the user's process had it (issue 33), and
    other processes' CPU, for the report's methodology table."""
    unset = {"unset": "not set (the OpenMP library's default)"}
    return {
        "torch threads": distinct_extra(run, "torch_num_threads"),
        "OpenMP wait policy": distinct_extra(run, "omp_wait_policy", unset),
        "GOMP_SPINCOUNT": distinct_extra(run, "gomp_spincount", unset),
        "flush-to-zero / denormals-are-zero": distinct_extra(
            run, "flush_denormal", {"False": "off", "True": "on (the timed code turned it on)"}
        ),
        "other processes' CPU": other_cpu_text(run),
    }


def comparison_drift(comparison: Comparison, threshold: float) -> list[DriftRow]:
    """`drift` of every benchmark's primary timing over the baseline runs and the current run.

    Runs are summarised as the verdicts summarise them (`levels.location_at` at the
    benchmark's common round count); the window may span steps (a step is drift too, and the
    change points name it). Sorted by the size of the change, largest first.
    """
    runs = [*comparison.baseline, comparison.current]
    rows = []
    for fullname, bench in comparison.current.benchmarks.items():
        if higher_is_better(primary_metric(bench)):
            continue  # a rate's rounds (a capacity cell): not a timing that drifts
        present = [
            (r, b) for r in runs if (b := r.benchmarks.get(fullname)) is not None and b.rounds_s
        ]
        rounds = common_rounds([b.rounds_s for _, b in present])
        logs = [
            math.log(location_at(b.rounds_s, rounds)) for _, b in present if min(b.rounds_s) > 0
        ]
        if len(logs) != len(present):
            continue
        found = drift(logs, threshold)
        if found is not None:
            commit = present[found.since][0].commit_id
            rows.append(
                DriftRow(comparison.machine_id, fullname, primary_metric(bench), found, commit)
            )
    return sorted(rows, key=lambda r: -abs(r.drift.rel_change))


def suite_drift(rows: Sequence[DriftRow], benchmarks: int) -> float | None:
    """Suite-wide drift: the median change over every benchmark (0 for those without drift),
    when at least half of the benchmarks drifted; else None."""
    if benchmarks == 0 or 2 * len(rows) < benchmarks:
        return None
    changes = [r.drift.rel_change for r in rows] + [0.0] * (benchmarks - len(rows))
    return statistics.median(changes)
