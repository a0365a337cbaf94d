"""Paired statistics of an A/B run: per-round log-ratios, a robust location, its standard error.

Pure functions on plain numbers; `tests/reports/analysis/test_paired.py` checks them on fake sides
whose
rounds carry a known shift plus noise common to both sides, over many seeds.

Round i of the head and round i of the base of one benchmark were timed right after one
another (`benchmarks/ab`), so anything that moves both — a burst of load from another
process, a thermal or frequency change, a slow minute of the machine — moves both by about the
same factor and cancels in the **log-ratio** `d_i = log(head_i / base_i)`. What is left is the
stack difference plus the rounds' own, independent noise.

Location and uncertainty: **Yuen's 20 % trimmed mean** of the `d_i` (Yuen 1974; Wilcox,
*Introduction to Robust Estimation*, ch. 4): sort the `n` log-ratios, drop `g = floor(0.2 n)`
from each end, average the `h = n - 2g` left. Its standard error comes from the winsorized
variance `s_w^2` (the dropped values replaced by the nearest kept one): `se = sqrt((n - 1) s_w^2
/ (h (h - 1)))`, with a Student t reference on `h - 1` degrees of freedom. Up to 20 % of the
pairs at each end — a round that caught a context switch on one side only — cannot move the
estimate or inflate its error the way they would a paired t-test's, while for normal noise the
efficiency loss is small (about 5 % against the mean).

Pairing cancels what the two processes share, not what sets them apart: two processes of one
stack differ in memory layout (heap and stack addresses, alignment of the tensors) and thread
placement, and a kernel's speed can depend on both. In A/A runs on the development machine
that left a spread of about 1 % between the two sides' estimates beyond their standard errors
(one cell, tiny-gpt2 bf16 decode, 7 % apart with a 0.3 % standard error), which no number of
pairs reduces. `evidence` therefore adds a **process term** to the variance,
`log1p(process_cv)^2` (default `PROCESS_CV` = 1 %), a known-size component with infinite
degrees of freedom, and combines the degrees of freedom by Welch-Satterthwaite. The result is an
`Evidence` for `reports.analysis.decision`, the same threshold rule and suite-level Holm control as
the
history gate.

Checks beyond the paired estimate: neighbouring pairs share a machine state, so the error is
inflated for lag-1 correlation (`correlated_estimate`); a run whose pairs disagree wildly or
whose ratio shifts mid-run is unstable (`instability`) and not judged; the p90 of the paired
ratios (`ratio_quantile`) is reported beside the trimmed mean, which hides intermittent stalls;
`--interleave process` carries a run-level term (`PROCESS_INTERLEAVE_CV`).

Deliberately not here: files (`reports.ab`), the decision rule (`reports.analysis.decision`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reports.analysis.changepoints import detect_steps
from reports.analysis.decision import Decision, Evidence, RuleConfig, decide
from reports.analysis.levels import MAD_EFFICIENCY, robust_sd
from reports.analysis.shift import SuiteShift, estimate_shift

TRIM = 0.2
PROCESS_CV = 0.01  # between-process spread pairing cannot cancel (module docstring)
MIN_PAIRS = 3  # fewer pairs cannot estimate a spread: such a comparison is not judged


@dataclass(frozen=True)
class PairedEstimate:
    """A robust estimate of one benchmark's log-ratio head/base from its paired rounds."""

    pairs: int
    log_ratio: float  # trimmed mean of log(head_i / base_i)
    se: float
    df: float
    trimmed_each_end: int

    @property
    def ratio(self) -> float:
        """head / base, from the trimmed mean log-ratio."""
        return math.exp(self.log_ratio)

    def evidence(
        self, threshold: float, process_cv: float = PROCESS_CV, process_df: float = math.inf
    ) -> Evidence:
        """The decision rule's input, the process term added (timings: worse = log_ratio).

        se_total^2 = se^2 + log1p(process_cv)^2; df by Welch-Satterthwaite,
        se_total^4 / (se^4 / df + term^4 / process_df): a term estimated from the run itself
        (`--interleave process`: the spread across ~49 timings, ~18 effective df) enters with
        its degrees of freedom, a configured one with infinite df; process_cv = 0 gives the
        paired estimate alone.
        """
        if process_cv < 0 or process_df <= 0:
            raise ValueError(f"need process_cv >= 0 and process_df > 0: {process_cv} {process_df}")
        floor2 = math.log1p(process_cv) ** 2
        total2 = self.se**2 + floor2
        parts = (self.se**4 / self.df if self.se > 0 else 0.0) + floor2**2 / process_df
        df = total2**2 / parts if parts > 0 else self.df
        return Evidence(self.log_ratio, math.sqrt(total2), min(math.inf, df), threshold)


def log_ratios(base_s: Sequence[float], head_s: Sequence[float]) -> list[float]:
    """log(head_i / base_i) for every round index both sides have (rounds must be > 0)."""
    pairs = min(len(base_s), len(head_s))
    out = []
    for b, h in zip(base_s[:pairs], head_s[:pairs], strict=True):
        if b <= 0 or h <= 0 or not math.isfinite(b + h):
            raise ValueError(f"round times must be positive and finite, got base {b} head {h}")
        out.append(math.log(h / b))
    return out


def paired_series(
    base: Mapping[str, Sequence[float]],
    head: Mapping[str, Sequence[float]],
    higher_is_better: Callable[[str], bool],
) -> list[tuple[str, list[float]]]:
    """Per-round series both sides carry, as (name, per-pair log-ratios), oriented so that a
    positive log-ratio is worse: log(base / head) for a higher-is-better series (goodput)."""
    out = []
    for name in [n for n in base if n in head]:
        diffs = log_ratios(base[name], head[name])
        out.append((name, [-d for d in diffs] if higher_is_better(name) else diffs))
    return out


def trimmed_estimate(diffs: Sequence[float], trim: float = TRIM) -> PairedEstimate:
    """Yuen's trimmed mean of `diffs`, its standard error and degrees of freedom.

    `trim` is the fraction cut from each end (0 <= trim < 0.5); needs at least MIN_PAIRS values.
    With trim = 0 this is the paired t-test's mean and standard error.
    """
    n = len(diffs)
    if n < MIN_PAIRS:
        raise ValueError(f"a paired estimate needs at least {MIN_PAIRS} pairs, got {n}")
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must lie in [0, 0.5), got {trim}")
    ordered = sorted(diffs)
    g = math.floor(trim * n)
    h = n - 2 * g
    kept = ordered[g : n - g]
    mean = sum(kept) / h
    low, high = kept[0], kept[-1]
    winsorized = [min(max(x, low), high) for x in ordered]
    w_mean = sum(winsorized) / n
    w_var = sum((x - w_mean) ** 2 for x in winsorized) / (n - 1)
    se = math.sqrt((n - 1) * w_var / (h * (h - 1)))
    return PairedEstimate(pairs=n, log_ratio=mean, se=se, df=float(h - 1), trimmed_each_end=g)


def paired_estimate(
    base_s: Sequence[float], head_s: Sequence[float], trim: float = TRIM
) -> PairedEstimate:
    """`trimmed_estimate` of the paired log-ratios of two sides' rounds of one benchmark."""
    return trimmed_estimate(log_ratios(base_s, head_s), trim)


#: Pairs whose log-ratio lies this far from the median (1.5x apart) disagree wildly.
WILD_LOG_RATIO = math.log(1.5)
#: Wild pairs on one side only (stalls of one side) make a run unstable from this share on...
WILD_SHARE = 0.05
#: ... when they also move the plain mean this far from the trimmed one (half the default
#: threshold: a tail that big would change a verdict the trimmed mean hides).
TAIL_SHIFT = 0.025
#: Wild pairs on both sides beyond this share are more than the 20 % trim can absorb.
WILD_SHARE_MAX = 0.2
#: A step of at least this size in the log-ratios (one side changed regime mid-run) is
#: unstable (a real difference between the sides shifts every pair alike: no step).
REGIME_STEP = 0.15
#: The run-level term of `--interleave process` (one side's process, then the other's): two
#: processes' whole-run states differ (frequency, placement, layout), 2 % each in A/A runs.
PROCESS_INTERLEAVE_CV = 0.03


def lag1_correlation(diffs: Sequence[float]) -> float:
    """Lag-1 autocorrelation of the pairs' log-ratios in time order, clipped to [0, 0.9].

    Neighbouring pairs share a machine state (a slow minute spans several rounds), which makes
    the trimmed mean's error larger than independent pairs would give. The estimate is
    corrected for its small-sample bias (-(1 + 3 rho) / n, Marriott-Pope) before clipping.
    """
    n = len(diffs)
    if n < 8:
        return 0.0
    mean = sum(diffs) / n
    dev = [d - mean for d in diffs]
    var = sum(x * x for x in dev)
    if var == 0:
        return 0.0
    rho = sum(a * b for a, b in itertools.pairwise(dev)) / var
    rho += (1.0 + 3.0 * max(rho, 0.0)) / n
    return min(0.9, max(0.0, rho))


def correlated_estimate(diffs: Sequence[float], trim: float = TRIM) -> PairedEstimate:
    """`trimmed_estimate` with its standard error inflated for lag-1 correlation.

    For AR(1) pairs with correlation rho the variance of a mean grows by (1 + rho) / (1 - rho);
    the degrees of freedom shrink by the same factor (the effective number of pairs).
    """
    est = trimmed_estimate(diffs, trim)
    rho = lag1_correlation(diffs)
    if rho == 0.0:
        return est
    inflation = (1.0 + rho) / (1.0 - rho)
    return PairedEstimate(
        pairs=est.pairs,
        log_ratio=est.log_ratio,
        se=est.se * math.sqrt(inflation),
        df=max(1.0, est.df / inflation),
        trimmed_each_end=est.trimmed_each_end,
    )


def instability(diffs: Sequence[float]) -> str:
    """Why the pairs of one benchmark cannot be judged, or "" when they are stable.

    - one side's stalls: at least `WILD_SHARE` of the pairs 1.5x or more from the median
      log-ratio, at least three quarters of them in one direction (one side's rounds stalled,
      not both), and the plain mean `TAIL_SHIFT` or more from the trimmed mean (the tail the
      trimmed mean hides would move a verdict);
    - wild pairs in both directions beyond `WILD_SHARE_MAX` (more than the trim absorbs);
    - a regime shift: a step of `REGIME_STEP` or more in the log-ratios over time (one side's
      rounds jumped mid-run while the other's did not).

    Wild pairs that fall on both sides alike are the machine's noise hitting both processes
    (the 2-core development VM: ~5 % of tiny models' pairs in A/A runs): the trimmed mean cuts
    them, and calling them unstable made every A/A run there inconclusive.
    """
    n = len(diffs)
    if n < MIN_PAIRS:
        return ""
    ordered = sorted(diffs)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    up = sum(d - median >= WILD_LOG_RATIO for d in diffs)
    down = sum(median - d >= WILD_LOG_RATIO for d in diffs)
    one_sided = max(up, down)
    shift = sum(diffs) / n - trimmed_estimate(diffs).log_ratio
    if (
        one_sided >= max(2, math.ceil(WILD_SHARE * n))
        and 4 * min(up, down) <= one_sided
        and abs(shift) >= TAIL_SHIFT
    ):
        side = "head" if up > down else "base"
        return (
            f"unstable run: {one_sided} of {n} pairs 1.5x or more apart from the rest, the "
            f"{side} slower in {one_sided - min(up, down)} more of them than faster (stalls on "
            f"one side: the mean ratio differs by {math.expm1(shift):+.1%} from the trimmed mean)"
        )
    if up + down >= max(2, math.ceil(WILD_SHARE_MAX * n)):
        return f"unstable run: {up + down} of {n} pairs 1.5x or more apart from the rest"
    # A regime lasts: a segment of a tenth of the pairs at least (with hundreds of noisy pairs,
    # 3-4 neighbouring stalls made "steps" at pair 4 of 46 or 165 of 200 in A/A runs).
    steps = detect_steps(diffs, min_rel_step=REGIME_STEP, min_size=max(3, n // 10))
    if steps:
        s = steps[-1]
        return (
            f"unstable run: the ratio shifted {s.rel_change:+.0%} at pair {s.index + 1} of {n} "
            "(a regime change on one side)"
        )
    return ""


def ratio_quantile(diffs: Sequence[float], q: float) -> float:
    """The q-quantile of the paired ratios head/base (nearest rank): the tail a trimmed mean
    hides (p90 shows intermittent stalls)."""
    if not diffs:
        raise ValueError("ratio_quantile needs at least one pair")
    ordered = sorted(diffs)
    return math.exp(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def run_level_cv(timings: Sequence[Sequence[float]]) -> float:
    """How far two processes' levels scatter across a run's timings (each given by its pairs'
    log-ratios), as a fraction; 0.0 with fewer than 3 timings of MIN_PAIRS pairs or more.

    With `--interleave process` one side's process runs all its rounds, then the other's, so
    every benchmark's ratio carries that pair of processes' difference *at that time*, which no
    number of rounds narrows. Across benchmarks those differences scatter like the run-level
    noise; 1.4826 x the MAD of the timings' trimmed log-ratios estimates it robustly (a PR that
    changes a minority of benchmarks moves few of them). On the 2-core development VM two A/A
    process-interleaved runs scattered 41 % and 29 % (rounds interleaved: ~1 %, the pairs'
    own error); a 3 % assumed term failed 5 and 1 timings there, 1.6x and 1.4x apart.
    """
    levels = [correlated_estimate(d).log_ratio for d in timings if len(d) >= MIN_PAIRS]
    if len(levels) < 3:
        return 0.0
    return math.expm1(robust_sd(levels))


def judge_pairs(
    timings: Sequence[Sequence[float]],
    thresholds: Sequence[float],
    process_cv: float,
    alpha: float,
    process_df: float = math.inf,
) -> list[tuple[PairedEstimate, Decision, str]]:
    """Every timing of one A/B run judged together (Holm across them): per timing its estimate,
    its decision and why its pairs are unstable ("" when stable; the verdict is then
    `inconclusive`, whatever the decision). `reports.ab` and the simulation both call this."""
    estimates = [correlated_estimate(d) for d in timings]
    decisions = decide(
        [
            est.evidence(t, process_cv, process_df)
            for est, t in zip(estimates, thresholds, strict=True)
        ],
        RuleConfig(alpha=alpha),
    )
    return list(zip(estimates, decisions, [instability(d) for d in timings], strict=True))


@dataclass(frozen=True)
class ProcessTerm:
    """`--interleave process`: the run-level term, its degrees of freedom, the common shift."""

    cv: float
    df: float
    shift: SuiteShift | None

    @property
    def estimated(self) -> bool:
        """True when the term is the run's own spread (else the configured floor)."""
        return not math.isinf(self.df)


def process_run_term(
    timings: Sequence[Sequence[float]], floor_cv: float, alpha: float
) -> ProcessTerm:
    """The run-level term and the common shift of a process-interleaved run.

    The term is the spread of the timings' levels (`run_level_cv`) with `MAD_EFFICIENCY` x
    timings degrees of freedom, or `floor_cv` (infinite df) when larger. The shift is the
    median level (`shift.estimate_shift`) against the whole-run difference two processes of
    one stack show (`PROCESS_INTERLEAVE_CV`, known): said when named, never subtracted.
    """
    spread = run_level_cv(timings)
    counted = sum(len(d) >= MIN_PAIRS for d in timings)
    if spread > floor_cv:
        cv, df = spread, max(1.0, MAD_EFFICIENCY * counted)
    else:
        cv, df = floor_cv, math.inf
    levels = [correlated_estimate(d) for d in timings if len(d) >= MIN_PAIRS]
    found = estimate_shift(
        [e.log_ratio for e in levels],
        [e.se**2 + math.log1p(cv) ** 2 for e in levels],
        math.log1p(PROCESS_INTERLEAVE_CV) ** 2,
        df=math.inf,
        alpha=alpha,
    )
    return ProcessTerm(cv, df, found)


def judge_process_run(
    timings: Sequence[Sequence[float]],
    thresholds: Sequence[float],
    term: ProcessTerm,
    alpha: float,
) -> list[tuple[PairedEstimate, Decision, str]]:
    """`judge_pairs` for `--interleave process` with the run's term (`process_run_term`).

    Nothing is re-centred on a common shift (DESIGN §6, A/B mode): both sides ran on this
    machine, so a move of every timing is the head's code unless something measured says
    otherwise; a named shift is said (`process_notes`), never subtracted."""
    return judge_pairs(timings, thresholds, term.cv, alpha, term.df)


def process_notes(term: ProcessTerm, threshold: float) -> dict[str, str]:
    """What `--interleave process` adds to the A/B record (`context.json`): the run-level term
    when estimated from the run, and a named common shift that reaches `threshold`."""
    out = {}
    if term.estimated:
        out["process_term"] = (
            f"process interleave: run-level term {term.cv:.1%} ({term.df:.0f} df), the spread "
            "of the two processes' levels across this run's timings (at least "
            f"{PROCESS_INTERLEAVE_CV:.0%}); on a quiet machine it is a few percent"
        )
    shift = term.shift
    if shift is not None and shift.named and shift.reaches(threshold):
        out["process_shift"] = (
            f"every timing of the head moved {shift.ratio - 1:+.1%} together (interval "
            f"{shift.ci_low - 1:+.1%} … {shift.ci_high - 1:+.1%}); judged as the head's code "
            "(nothing is re-centred in A/B mode); if one process's window was disturbed (another "
            "job, a frequency state), re-run with rounds interleaved"
        )
    return out
