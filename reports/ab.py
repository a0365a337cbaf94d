"""`python -m reports.ab`: paired verdicts of an A/B run, `ab.json`, `index.html`, `summary.md`.

Reads the two sides' pytest-benchmark JSON (`DIR/base.json`, `DIR/head.json`, written by
`python -m benchmarks.ab`) and `DIR/context.json` (who the sides were), and judges every
benchmark both sides ran: its **timing** (pytest-benchmark's round statistic: `prefill_s`,
`decode_step_s`, `e2e_s`, `serve_pass_s`, `time_s`) from the paired rounds (`paired`: Yuen's
trimmed mean of the per-pair log-ratios) with the gate's rule (`decision`: one-sided test against
`1 + threshold`, Holm over every timing of the run, the MDE at the corrected level); a record's
per-round series (`metrics.round_series`: a serving cell's TTFT p50/p90, TPOT p50, goodput, one
value per load pass) the same way, goodput (higher is better) on log(base / head), so its
`ratio` is the worse-ratio; its **exact** metrics (`metrics.is_exact_metric`: `kv_*_bytes`,
`weights_bytes`, ...): head against base, exactly (larger = `fail`, smaller = `improved`).
Per-run scalars (TTFT, ITL percentiles, memory peaks) have one value per side and are judged
across runs by the history report only; `accuracy_*` fields nowhere. A benchmark on one side
only is `new` (head only) or `missing` (base only: fails like a `fail`).

Each timing's error is inflated for lag-1 correlation between neighbouring pairs; a timing
whose pairs disagree wildly or shift mid-run is `inconclusive` with the reason (`unstable`),
never `fail`; `ratio_p90` shows the tail of the paired ratios beside the trimmed mean.
Re-judging (`--out DIR` alone) uses the settings the run recorded in `context.json`
(`judge`: process term, alpha, thresholds); a process-interleaved run carries a run-level term
of at least `paired.PROCESS_INTERLEAVE_CV` and the spread its own timings show
(`paired.run_level_cv`). `--settings own` (the CI gate's re-judge) never reads a setting from
`context.json`, which is written on the machine where the measured code ran: the flags, else
this checkout's defaults, rounds interleaving; the file is shown, and each recorded setting
that differs is listed in `settings_notes`.

`ab.json` (schema 1; fields added, none changed): `schema`, `status` (`pass` / `fail` /
`inconclusive` / `error`), `status_reason`, `threshold`, `alpha`, `process_cv`, `settings`
(`recorded` / `own`), `settings_notes`, `context`, `counts`, `benchmarks` (`fullname`,
`metric`, `kind`, `verdict`, `ratio` = head/base, `ci_low`, `ci_high`, `mde`, `threshold`,
`pairs`, p-values, `base_value`, `head_value`, `log_ratios`, `note`, `ratio_p90`,
`unstable`). Exit 0 pass, 1 fail, 2 error, 3 inconclusive
(an unstable run, or nothing decided: never a pass).

Deliberately not here: running the sides (benchmarks/ab), the formulas (`paired`,
`decision`), markup (`render.ab`). Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reports.ab_settings import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    MODES,
    read_context,
    resolve,
)
from reports.analysis.exact import exact_change_text
from reports.analysis.metrics import (
    exact_values,
    higher_is_better,
    primary_metric,
    round_series,
)
from reports.analysis.paired import (
    MIN_PAIRS,
    PROCESS_CV,
    PROCESS_INTERLEAVE_CV,
    ProcessTerm,
    judge_pairs,
    judge_process_run,
    log_ratios,
    paired_series,
    process_notes,
    process_run_term,
    ratio_quantile,
)
from reports.errors import ReportError
from reports.history.runfile import BenchmarkResult, RunFile, load_files

SCHEMA = 1
EXIT = {"pass": 0, "fail": 1, "error": 2, "inconclusive": 3}
VERDICTS = ("fail", "missing", "inconclusive", "improved", "new", "pass")


@dataclass(frozen=True)
class ABConfig:
    """The rule's settings: threshold (default and per metric) and the family-wise alpha."""

    threshold: float = DEFAULT_THRESHOLD
    per_metric: Mapping[str, float] = field(default_factory=dict)
    alpha: float = DEFAULT_ALPHA
    process_cv: float = PROCESS_CV
    process_run: ProcessTerm | None = None  # `--interleave process`: its term and shift

    def threshold_for(self, metric: str) -> float:
        """The practical threshold of `metric`."""
        return self.per_metric.get(metric, self.threshold)


@dataclass(frozen=True)
class ABEntry:
    """The verdict on one benchmark's metric: head against base."""

    fullname: str
    metric: str
    kind: str  # "timing" (paired rounds) or "exact"
    verdict: str
    threshold: float
    pairs: int = 0
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mde: float | None = None
    p_fail: float | None = None
    p_fail_adjusted: float | None = None
    p_improved_adjusted: float | None = None
    base_value: float | None = None
    head_value: float | None = None
    log_ratios: tuple[float, ...] = ()
    note: str = ""
    ratio_p90: float | None = None  # p90 of the paired ratios: the tail the trimmed mean hides
    unstable: str = ""  # why the pairs could not be judged (paired.instability), or ""


def _one_side(fullname: str, metric: str, kind: str, threshold: float, head_only: bool) -> ABEntry:
    verdict, where = ("new", "head") if head_only else ("missing", "base")
    return ABEntry(fullname, metric, kind, verdict, threshold, note=f"only the {where} ran it")


def _exact(fullname: str, metric: str, base: float, head: float, threshold: float) -> ABEntry:
    entry = ABEntry(fullname, metric, "exact", "pass", threshold, base_value=base, head_value=head)
    entry = replace(entry, ratio=head / base if base else None, note="unchanged")
    if head == base:
        return entry
    grew = head > base
    note = f"{'grew' if grew else 'shrank'} by {exact_change_text(head - base)} (exact comparison)"
    return replace(entry, verdict="fail" if grew else "improved", note=note)


def judge(
    base: Mapping[str, BenchmarkResult], head: Mapping[str, BenchmarkResult], config: ABConfig
) -> list[ABEntry]:
    """Verdicts of every benchmark and metric of the two sides (pure; module docstring)."""
    names = list(base) + [n for n in head if n not in base]
    timings: list[ABEntry] = []
    others: list[ABEntry] = []
    for fullname in names:
        b, h = base.get(fullname), head.get(fullname)
        if b is None or h is None:
            present = h if b is None else b
            assert present is not None
            metric = primary_metric(present)
            others.append(
                _one_side(fullname, metric, "timing", config.threshold_for(metric), b is None)
            )
            for name in exact_values(present):
                others.append(
                    _one_side(fullname, name, "exact", config.threshold_for(name), b is None)
                )
            continue
        metric = primary_metric(b)
        threshold = config.threshold_for(metric)
        diffs = tuple(log_ratios(b.rounds_s, h.rounds_s))
        if higher_is_better(metric):  # a capacity cell's rate: a positive log-ratio is worse
            diffs = tuple(-d for d in diffs)
        entry = ABEntry(
            fullname,
            metric,
            "timing",
            "inconclusive",
            threshold,
            pairs=len(diffs),
            base_value=statistics.median(b.rounds_s),
            head_value=statistics.median(h.rounds_s),
            log_ratios=diffs,
        )
        for judged in (entry, *_series_entries(fullname, b, h, config)):
            if judged.pairs < MIN_PAIRS:
                note = f"{judged.pairs} pair(s): at least {MIN_PAIRS} are needed"
                others.append(replace(judged, note=note))
            else:
                timings.append(judged)
        base_exact, head_exact = exact_values(b), exact_values(h)
        for name in list(base_exact) + [n for n in head_exact if n not in base_exact]:
            t = config.threshold_for(name)
            if name not in head_exact or name not in base_exact:
                others.append(_one_side(fullname, name, "exact", t, name not in base_exact))
            else:
                others.append(_exact(fullname, name, base_exact[name], head_exact[name], t))
    return _decide_timings(timings, config) + others


def _series_entries(
    fullname: str, base: BenchmarkResult, head: BenchmarkResult, config: ABConfig
) -> list[ABEntry]:
    """The per-round series both sides carry (`metrics.round_series`), as timings."""
    b_series, h_series = round_series(base), round_series(head)
    return [
        ABEntry(fullname, name, "timing", "inconclusive", config.threshold_for(name),
                pairs=len(diffs), base_value=statistics.median(b_series[name]),
                head_value=statistics.median(h_series[name]), log_ratios=tuple(diffs))
        for name, diffs in paired_series(b_series, h_series, higher_is_better)
        if name != primary_metric(base)  # the rounds themselves (`rounds_statistic`)
    ]  # fmt: skip


def _decide_timings(entries: Sequence[ABEntry], config: ABConfig) -> list[ABEntry]:
    diffs, thresholds = [e.log_ratios for e in entries], [e.threshold for e in entries]
    if config.process_run is not None:
        judged = judge_process_run(diffs, thresholds, config.process_run, config.alpha)
    else:
        judged = judge_pairs(diffs, thresholds, config.process_cv, config.alpha)
    out = []
    for e, (est, d, unstable) in zip(entries, judged, strict=True):
        note = (
            f"trimmed mean of {est.pairs} pairs' log-ratios, {est.trimmed_each_end} cut "
            "from each end"
        )
        out.append(
            replace(
                e,
                verdict="inconclusive" if unstable else d.outcome,
                ratio_p90=ratio_quantile(e.log_ratios, 0.9),
                unstable=unstable,
                ratio=d.ratio,
                ci_low=d.ci_low,
                ci_high=d.ci_high,
                mde=d.mde,
                p_fail=d.p_fail,
                p_fail_adjusted=d.p_fail_adjusted,
                p_improved_adjusted=d.p_improved_adjusted,
                note=f"{unstable} (would be {d.outcome}); {note}" if unstable else note,
            )
        )
    return out


def status_of(entries: Sequence[ABEntry], shift: str = "") -> tuple[str, str]:
    """(`pass` | `fail` | `inconclusive` | `error`, the reason in a few words).

    `inconclusive` (never PASS): no fail or missing, and `shift` names a common shift of every
    timing that reaches the threshold (a process-interleaved run whose head window moved as a
    whole, yet no timing failed), some timing was unstable, or no timing could be decided. A
    move of every pair is never re-centred: it fails like any other (DESIGN §8).
    """
    compared = [e for e in entries if e.verdict not in ("new", "missing")]
    if not compared:
        return "error", "the two sides have no benchmark in common"
    fails = sum(e.verdict == "fail" for e in entries)
    missing = sum(e.verdict == "missing" for e in entries)
    if fails or missing:
        return "fail", f"{fails} regression(s) beyond the threshold, {missing} missing on the head"
    if shift:
        return "inconclusive", shift
    timings = [e for e in compared if e.kind == "timing"]
    unstable = [e for e in timings if e.unstable]
    if unstable:
        return "inconclusive", (
            f"{len(unstable)} of {len(timings)} timing(s) unstable (e.g. {unstable[0].unstable}):"
            " the machine was probably busy; re-run on a quiet machine"
        )
    if timings and all(e.verdict == "inconclusive" for e in timings):
        return "inconclusive", (
            f"nothing could be decided: all {len(timings)} timing(s) straddle the threshold; "
            "add pairs (--pairs) or quiet the machine"
        )
    return "pass", f"no regression beyond the threshold in {len(compared)} comparisons"


def counts(entries: Sequence[ABEntry]) -> dict[str, int]:
    """How many entries have each verdict (every verdict present)."""
    return {v: sum(e.verdict == v for e in entries) for v in VERDICTS}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, tuple | list):
        return [_finite(v) for v in value]
    return value


def ab_json(
    entries: Sequence[ABEntry],
    config: ABConfig,
    context: Mapping[str, Any],
    *,
    settings: str = "recorded",
    settings_notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The `ab.json` document (schema 1); `settings_notes`: recorded settings not used."""
    status, reason = status_of(entries, str(context.get("process_shift", "")))
    return {
        "schema": SCHEMA,
        "status": status,
        "status_reason": reason,
        "threshold": config.threshold,
        "per_metric_threshold": dict(config.per_metric),
        "alpha": config.alpha,
        "process_cv": config.process_run.cv if config.process_run else config.process_cv,
        "settings": settings,
        "settings_notes": list(settings_notes),
        "counts": counts(entries),
        "context": dict(context),
        "benchmarks": [{k: _finite(v) for k, v in asdict(e).items()} for e in entries],
    }


def load_side(path: Path, name: str) -> tuple[RunFile, dict[str, BenchmarkResult]]:
    """One side's pytest-benchmark file and its benchmarks by fullname; ReportError if unusable."""
    files, skipped = load_files([path])
    if skipped or not files:
        reason = skipped[0].reason if skipped else "no file"
        raise ReportError(f"{path}: the {name} side's results cannot be used ({reason})")
    run = files[0]
    return run, {b.fullname: b for b in run.benchmarks}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reports.ab", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, metavar="DIR", help="the A/B run's folder")
    p.add_argument("--base", metavar="FILE", help="base JSON (default DIR/base.json)")
    p.add_argument("--head", metavar="FILE", help="head JSON (default DIR/head.json)")
    p.add_argument("--threshold", action="append", default=[], metavar="[METRIC=]FRACTION")
    p.add_argument("--alpha", type=float, default=None, help="default: the run's, else 0.01")
    p.add_argument(
        "--process-cv",
        type=float,
        default=None,
        help="between-process spread added to every paired error (default: the run's recorded "
        f"setting in context.json, else {PROCESS_CV}; at least {PROCESS_INTERLEAVE_CV} with "
        "--interleave process)",
    )
    p.add_argument(
        "--settings",
        choices=MODES,
        default="recorded",
        help="recorded (default): where no flag is given, the settings and interleaving the run "
        "recorded in context.json; own: the flags, else this checkout's defaults, rounds "
        "interleaving, never context.json's (the CI gate: that file comes from the runner)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Judge, write ab.json, index.html and summary.md; exit 0 pass, 1 fail, 2 error."""
    from reports.render.ab import render_html, render_summary  # noqa: PLC0415 - jinja2 only here

    args = _parser().parse_args(argv)
    out = Path(args.out)
    try:
        try:
            context = read_context(out / "context.json")
            unread = ""
        except ReportError as error:
            if args.settings != "own":
                raise
            context, unread = {}, f"context.json not shown: {error}"  # no setting needs it
        settings = resolve(args.settings, args.threshold, args.alpha, args.process_cv, context)
        config = ABConfig(
            threshold=settings.threshold,
            per_metric=settings.per_metric,
            alpha=settings.alpha,
            process_cv=settings.process_cv,
        )
        base_run, base = load_side(Path(args.base) if args.base else out / "base.json", "base")
        head_run, head = load_side(Path(args.head) if args.head else out / "head.json", "head")
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT["error"]
    context = dict(settings.context)
    notes = [*settings.notes, *([unread] if unread else [])]
    if settings.raised:
        context["process_term"] = settings.raised
    context["machine"] = {"base": base_run.machine_label, "head": head_run.machine_label}
    if context.get("interleave") == "process":
        first = [e for e in judge(base, head, config) if e.kind == "timing"]
        timings = [e.log_ratios for e in first if e.pairs >= MIN_PAIRS]
        term = process_run_term(timings, config.process_cv, config.alpha)
        config = replace(config, process_run=term)
        context.update(process_notes(term, config.threshold))
    entries = judge(base, head, config)
    document = ab_json(entries, config, context, settings=args.settings, settings_notes=notes)
    (out / "ab.json").write_text(json.dumps(document, indent=1), encoding="utf-8")
    (out / "index.html").write_text(render_html(document), encoding="utf-8")
    (out / "summary.md").write_text(render_summary(document), encoding="utf-8")
    for note in notes:
        print(f"ab: not used, as --settings {args.settings} says: {note}")
    for e in entries:
        if e.verdict in ("fail", "missing"):
            change = "" if e.ratio is None else f" {e.ratio - 1:+.1%}"
            print(f"{e.verdict.upper()} {e.fullname} {e.metric}{change} ({e.note})")
    print(f"ab: {document['status'].upper()}: {document['status_reason']}; wrote {out / 'ab.json'}")
    return EXIT[document["status"]]


if __name__ == "__main__":
    raise SystemExit(main())
