"""The quantization view and the accuracy flag (weights `quant` x KV `kv_quant` cells).

`reports.render.quant.quant_tables` on synthetic `BenchmarkResult`s with known figures (rows,
ratios, `—` without a baseline or a figure), `reports.analysis.accuracy` (the ACCURACY line),
the metric classification of the new fields (exact bytes; accuracy judged nowhere), and end to
end on a synthetic history: the report's section only with quantized cells, the headline and
summary naming a flagged cell without deciding the status, `python -m reports quant`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from reports.ab import exact_values
from reports.analysis.accuracy import accuracy_flags, cell_accuracy, is_quantized, quant_mode
from reports.analysis.exact import judge_exact
from reports.analysis.metrics import (
    is_accuracy_metric,
    is_exact_metric,
    is_timed_metric,
    metric_values,
)
from reports.analysis.series import AnalysisConfig, MetricSeries
from reports.cli import main as reports_main
from reports.history.runfile import BenchmarkResult
from reports.render.quant import (
    NO_RATIO,
    accuracy_cells,
    figure_text,
    has_quantized_cells,
    left_dense_lines,
    markdown,
    quant_tables,
    ratio_text,
    sqnr_rows,
)
from tests.data.reports.make_history import RunSpec, current_spec, write_history

CELL = {"model": "m", "device": "cpu", "dtype": "float32", "batch": 1, "prompt_len": 8,
        "new_tokens": 4}  # fmt: skip
OK_ACCURACY = {
    "accuracy_max_abs_logit_delta": 0.05,
    "accuracy_top1_agreement_ratio": 0.95,
    "accuracy_tokens": 4,
    "accuracy_bound_max_abs_logit_delta": 0.5,
    "accuracy_bound_top1_agreement_ratio": 0.8,
    "accuracy_flag": False,
}
BAD_ACCURACY = OK_ACCURACY | {
    "accuracy_max_abs_logit_delta": 3.2,
    "accuracy_top1_agreement_ratio": 0.40625,
    "accuracy_flag": True,
}


def bench(group, cell=CELL, extra=None, **mode):
    """One benchmark of a cell; `mode` names quant / kv_quant / kv settings as params."""
    params = {**cell, **mode}
    cell_id = "-".join(str(v) for v in params.values())
    name = f"test_{group}[{cell_id}]"
    return BenchmarkResult(
        fullname=f"benchmarks/test_{group}.py::{name}",
        name=name,
        group=group,
        params=params,
        rounds_s=(0.01,),
        extra={"measurement": group, "cell_id": cell_id, **(extra or {})},
    )


def cell(prefill, decode, weights, *, kv=None, kv_packed=None, peak=None, accuracy=None, **mode):
    """A cell's prefill and decode benchmarks with the given figures (None: not recorded)."""
    shared = {"weights_bytes": weights, "kv_bytes_per_token": kv, "peak_rss_bytes": peak}
    if kv_packed is not None:
        shared["kv_quant_bytes_per_token"] = kv_packed
    shared |= accuracy or {}
    return [
        bench("prefill", extra={**shared, "prefill_tok_per_s": prefill}, **mode),
        bench("decode", extra={**shared, "decode_tok_per_s": decode}, **mode),
    ]


def known_cells():
    ok, bad = OK_ACCURACY, BAD_ACCURACY
    return [
        *cell(100.0, 10.0, 1000, kv=64, peak=4000, quant="none", kv_quant="none"),
        *cell(210.0, 25.0, 270, kv=64, peak=2000, accuracy=ok, quant="int4wo-g32", kv_quant="none"),
        *cell(90.0, 9.0, 1000, kv=64, kv_packed=17.5, peak=3900, accuracy=ok, quant="none",
              kv_quant="hqq4", kv_group_size=32),
        *cell(150.0, 12.0, 500, kv=64, kv_packed=17.5, peak=None, accuracy=bad, quant="int8wo",
              kv_quant="hqq4"),
    ]  # fmt: skip


def test_rows_follow_the_axis_order_and_ratios_are_to_the_unquantized_cell():
    (table,) = quant_tables(known_cells())
    assert table.title == "m cpu float32 b1 p8 n4"
    assert [r.label for r in table.rows] == [
        "none / none", "none / hqq4 g32", "int8wo / hqq4", "int4wo-g32 / none"
    ]  # fmt: skip
    base, kv_only, both, int4 = table.rows
    assert table.baseline is base
    assert base.is_baseline
    assert int4.ratios["prefill_tok_per_s"] == pytest.approx(2.1)
    assert int4.ratios["decode_tok_per_s"] == pytest.approx(2.5)
    assert int4.ratios["weights_bytes"] == pytest.approx(0.27)
    assert int4.ratios["kv_bytes_per_token"] == pytest.approx(1.0)  # dense KV: unchanged
    assert int4.ratios["peak_memory_bytes"] == pytest.approx(0.5)
    # a quantized KV cache: its packed bytes per position against the dense cache's
    assert kv_only.values["kv_bytes_per_token"] == 17.5
    assert kv_only.ratios["kv_bytes_per_token"] == pytest.approx(17.5 / 64)
    assert both.ratios["peak_memory_bytes"] is None  # not recorded: no ratio
    # timed apart (no interleaved rounds): a plain ratio, marked approximate
    assert figure_text(int4, "prefill_tok_per_s") == "210 tok/s (~2.10\u00d7)"
    assert figure_text(int4, "weights_bytes") == "270 B (0.27\u00d7)"
    assert figure_text(both, "peak_memory_bytes") == NO_RATIO
    assert figure_text(base, "prefill_tok_per_s") == "100 tok/s"  # the baseline: no ratio
    assert accuracy_cells(base) == (NO_RATIO, NO_RATIO, NO_RATIO)  # the reference has none
    assert accuracy_cells(int4) == ("n/a", "n/a", "0.95 (bound 0.8)")  # no SQNR recorded
    text = markdown([table])
    assert (
        "| none / none (baseline) | 100 tok/s | 10 tok/s | \u2014 | 1,000 B | 64 B | 3.91 KiB "
        in text
    )
    assert (
        "| int4wo-g32 / none | 210 tok/s (~2.10\u00d7) | 25 tok/s (~2.50\u00d7) | \u2014 "
        "| 270 B (0.27\u00d7) | 64 B (1.00\u00d7) | 1.95 KiB (0.50\u00d7) | n/a | n/a "
        "| 0.95 (bound 0.8) |"
    ) in text


def test_a_flagged_cell_shows_the_flag_with_its_bound_and_an_accuracy_line():
    (table,) = quant_tables(known_cells())
    flagged = table.rows[2]
    assert flagged.flagged
    assert accuracy_cells(flagged) == ("n/a", "n/a", "\u2691 0.406 (bound 0.8)")
    (flag,) = accuracy_flags(known_cells())
    assert flag.line("hw1") == (
        "ACCURACY m-cpu-float32-1-8-4-int8wo-hqq4 int8wo/hqq4: max |\u0394 logit| 3.2 "
        "(bound 0.5), top-1 agreement 0.406 (bound 0.8) [hw1]"
    )
    # only the figure out of its bound is flagged; a flag naming neither marks both
    low = OK_ACCURACY | {"accuracy_flag": True, "accuracy_top1_agreement_ratio": 0.5}
    (acc,) = cell_accuracy(cell(1, 1, 1, accuracy=low, quant="nf4")).values()
    assert (acc.delta_outside, acc.agreement_outside) == (False, True)
    neither = OK_ACCURACY | {"accuracy_flag": True}
    (acc,) = cell_accuracy(cell(1, 1, 1, accuracy=neither, quant="nf4")).values()
    assert (acc.delta_outside, acc.agreement_outside) == (True, True)


def test_without_the_unquantized_cell_or_a_figure_the_ratio_is_a_dash():
    cells = known_cells()[2:]  # drop the none/none cell
    (table,) = quant_tables(cells)
    assert table.baseline is None
    assert all(v is None for r in table.rows for v in r.ratios.values())
    assert figure_text(table.rows[0], "prefill_tok_per_s") == "90 tok/s (\u2014)"
    assert "(no unquantized cell: no ratios)" in markdown([table])
    # a quantized KV cell without its packed figure: no KV figure (the dense one would read 1.00x)
    no_packed = cell(100, 10, 1000, kv=64, quant="none", kv_quant="none") + cell(
        100, 10, 1000, kv=64, quant="none", kv_quant="fp8"
    )
    (table,) = quant_tables(no_packed)
    assert table.rows[1].values["kv_bytes_per_token"] is None
    assert figure_text(table.rows[1], "kv_bytes_per_token") == NO_RATIO
    # a zero baseline figure and peaks of different fields give no ratio either
    other_peak = {"prefill_tok_per_s": 3.0, "peak_allocated_bytes": 4}
    zero = [
        *cell(0.0, 10, 1000, peak=5, quant="none"),
        bench("prefill", extra=other_peak, quant="nf4"),
    ]
    (table,) = quant_tables(zero)
    assert table.rows[1].ratios["prefill_tok_per_s"] is None
    assert table.rows[1].ratios["peak_memory_bytes"] is None
    assert ratio_text(None) == NO_RATIO
    assert ratio_text(0.274) == "0.27\u00d7"


def interleaved(measurement, rounds, dense_rounds, dense_id, figure, **mode):
    """An interleaved record: its own rounds and the dense cell's, paired by index."""
    b = bench(measurement, extra={figure: 1.0 / sorted(rounds)[len(rounds) // 2]}, **mode)
    extra = dict(b.extra) | {
        "measurement": measurement,
        "interleaved_dense_rounds_s": list(dense_rounds),
        "interleaved_dense_cell_id": dense_id,
    }
    return BenchmarkResult(b.fullname, b.name, b.group, b.params, tuple(rounds), extra)


def test_interleaved_rounds_give_the_speed_ratio_with_its_interval():
    # The host drifts 3x across the rounds; each pair moves together: the variant is 1.5x faster.
    level = [0.01 * (1 + 2 * i / 19) for i in range(20)]
    dense = [t * (1.01 if i % 2 else 0.99) for i, t in enumerate(level)]
    fast = [t / 1.5 for t in level]
    base_id = bench("decode", quant="none").cell_id
    cells = [
        *cell(100.0, 10.0, 1000, quant="none"),
        *cell(120.0, 12.0, 500, quant="int8wo"),
        interleaved("interleaved_decode", dense, dense, base_id, "decode_tok_per_s", quant="none"),
        interleaved("interleaved_decode", fast, dense, base_id, "decode_tok_per_s", quant="int8wo"),
    ]
    (table,) = quant_tables(cells)
    _base, int8 = table.rows
    speedup = int8.speedups["decode_tok_per_s"]
    assert speedup is not None
    assert speedup.pairs == 20
    assert speedup.ci_low < 1.5 < speedup.ci_high < 1.6
    assert int8.ratios["decode_tok_per_s"] == pytest.approx(1.5, rel=0.01)
    # the interleaved record's figure is shown, not the per-cell one timed apart
    assert int8.values["decode_tok_per_s"] == pytest.approx(1 / fast[10])
    text = figure_text(int8, "decode_tok_per_s")
    assert f"(1.50\u00d7 [{speedup.ci_low:.2f}, {speedup.ci_high:.2f}])" in text
    assert figure_text(int8, "prefill_tok_per_s") == "120 tok/s (~1.20\u00d7)"  # not paired
    # rounds paired with another cell than the table's baseline give no paired ratio
    other = interleaved("interleaved_decode", fast, dense, "elsewhere", "decode_tok_per_s",
                        quant="int8wo")  # fmt: skip
    (table,) = quant_tables([*cells[:3], other])
    assert table.rows[1].speedups["decode_tok_per_s"] is None


def test_sqnr_kl_and_the_linears_left_dense_are_shown():
    sqnr = {
        "quant_sqnr_db_min": 0.1,
        "quant_sqnr_db_min_tensor": "model.layers.1.mlp.down_proj",
        "quant_sqnr_db_weights_min": 0.1,
        "quant_sqnr_db_weights_bound": 15.0,
        "quant_sqnr_db_kv_min": None,
        "quant_sqnr_db_kv_bound": None,
        "quant_logits_kl": 0.0123,
        "quant_sqnr_db": {"mlp.down_proj": [21.0, 0.1], "self_attn.q_proj": [22.5, 23.0]},
        "weights_left_dense": [
            {"linears": "model.layers.*.mlp.gate_proj", "count": 2, "reason": "N=104 is odd"},
            {"linears": "lm_head", "count": 1, "reason": "the LM head stays in the dtype"},
        ],
    }
    broken = OK_ACCURACY | sqnr | {"accuracy_flag": True}
    (table,) = quant_tables(cell(1, 1, 1, quant="none") + cell(1, 1, 1, accuracy=broken,
                                                                quant="int4wo-g64"))  # fmt: skip
    row = table.rows[1]
    acc = row.accuracy
    assert acc is not None
    assert acc.sqnr_outside
    assert (acc.delta_outside, acc.agreement_outside) == (False, False)  # SQNR named the flag
    assert accuracy_cells(row) == ("\u2691 0.1 dB (bound 15)", "0.012", "0.95 (bound 0.8)")
    assert "SQNR min 0.1 dB (bound 15) at model.layers.1.mlp.down_proj" in acc.text
    assert left_dense_lines(table) == [
        "int4wo-g64 / none: model.layers.*.mlp.gate_proj \u00d72 (N=104 is odd)"
    ]  # the LM head, dense for every method, is not repeated
    assert sqnr_rows(table) == [
        ("int4wo-g64 / none", "mlp.down_proj", "0.1", "21.0", "21.0 0.1"),
        ("int4wo-g64 / none", "self_attn.q_proj", "22.5", "23.0", "22.5 23.0"),
    ]
    assert "Linears left dense: int4wo-g64 / none: model.layers.*.mlp.gate_proj" in markdown(
        [table]
    )


def test_cells_without_quantization_make_no_table_and_absent_axes_are_none():
    plain = cell(100, 10, 1000)
    assert quant_tables(plain) == []
    assert not has_quantized_cells(plain)
    assert quant_mode(CELL) == ("none", "none")
    assert not is_quantized({**CELL, "quant": "none", "kv_quant": "none"})
    # a cell that names no axis is the baseline of the same cell quantized
    (table,) = quant_tables(plain + cell(200, 20, 250, quant="int4wo-g64"))
    assert table.rows[1].ratios["prefill_tok_per_s"] == pytest.approx(2.0)
    # explicit KV settings are rows of their own, in numeric order
    groups = [
        *cell(1, 1, 1, kv_packed=9, quant="none", kv_quant="hqq4", kv_group_size=128),
        *cell(1, 1, 1, kv_packed=9, quant="none", kv_quant="hqq4", kv_group_size=32, kv_residual=8),
    ]
    (table,) = quant_tables(groups)
    assert [r.label for r in table.rows] == ["none / hqq4 g32 r8", "none / hqq4 g128"]
    # other params split groups, as in the run-mode view
    other = cell(1, 1, 1, cell={**CELL, "prompt_len": 16}, quant="nf4")
    titles = [t.title for t in quant_tables(known_cells() + other)]
    assert titles == ["m cpu float32 b1 p16 n4", "m cpu float32 b1 p8 n4"]


def test_the_new_byte_counts_are_exact_and_accuracy_is_judged_nowhere():
    for name in ("weights_bytes", "weights_dense_bytes", "weights_analytic_bytes",
                 "kv_quant_bytes_per_token", "kv_measured_final_bytes"):  # fmt: skip
        assert is_exact_metric(name), name
        assert not is_timed_metric(name, "exact")
    assert not is_exact_metric("kv_bytes_per_token")  # unjudged as before (the final bytes are)
    for name in BAD_ACCURACY:
        assert is_accuracy_metric(name)
        assert not is_exact_metric(name)
        assert not is_timed_metric(name, "scalar")
    extra = {"weights_dense_bytes": 4000, "weights_analytic_bytes": 1000, "weights_bytes": 1000,
             "kv_quant_bytes_per_token": 17.5, **BAD_ACCURACY}  # fmt: skip
    b = bench("decode", extra=extra, quant="int8wo")
    kinds = {name: kind for name, (kind, _) in metric_values(b).items()}
    assert kinds == {"decode_step_s": "timing", "weights_bytes": "exact",
                     "weights_dense_bytes": "exact", "weights_analytic_bytes": "exact",
                     "kv_quant_bytes_per_token": "exact"}  # fmt: skip
    assert set(exact_values(b)) == set(kinds) - {"decode_step_s"}  # the A/B compares the same
    # a fractional per-token figure compares exactly and says its change as a fraction
    series = MetricSeries("hw", "f", "kv_quant_bytes_per_token", "exact", ((17.5,),), (17.75,))
    verdict = judge_exact(series, AnalysisConfig())
    assert verdict.verdict == "fail"
    assert verdict.note == "grew by 0.25 (exact comparison)"


# -- end to end: a synthetic history whose cells are split into quantized ones -----------------

MODES = {  # (quant, kv_quant) -> (speed factor, weights factor, packed KV bytes per token or None)
    ("none", "none"): (1.0, 1.0, None),
    ("int4wo-g32", "none"): (2.0, 0.25, None),
    ("none", "hqq4"): (0.8, 1.0, 36.0),
    ("int8wo", "hqq4"): (1.5, 0.5, 36.0),
}


def quant_history(tmp_path: Path, runs: int = 3, flag_current: bool = True) -> Path:
    """A history whose every cell runs in the four `MODES` (known factors); the current run's
    int8wo/hqq4 cells are outside their accuracy bound when `flag_current`, no earlier run's."""
    hist = tmp_path / "quant-hist"
    # quiet runs: the status tests read PASS, which needs most timings decided (issue 51)
    quiet = {"run_cv": 0.003, "round_cv": 0.005}
    base = RunSpec(commit="", when=datetime(2026, 1, 1, tzinfo=timezone.utc), **quiet)
    paths = write_history(hist, runs, seed=5, base=base, current=current_spec(**quiet))
    for i, path in enumerate(paths):
        data = json.loads(path.read_text())
        split = []
        for b in data["benchmarks"]:
            for (quant, kv_quant), (speed, weights, kv_packed) in MODES.items():
                suffix = f"-q_{quant}-kvq_{kv_quant}"
                c = json.loads(json.dumps(b))
                c["name"] = b["name"].replace("]", suffix + "]")
                c["fullname"] = b["fullname"].replace("]", suffix + "]")
                c["params"] |= {"quant": quant, "kv_quant": kv_quant}
                extra = c["extra_info"]
                extra["cell_id"] += suffix
                for key in ("prefill_tok_per_s", "decode_tok_per_s"):
                    if key in extra:
                        extra[key] *= speed
                c["stats"]["data"] = [t / speed for t in c["stats"]["data"]]
                extra["weights_dense_bytes"] = extra["weights_bytes"]
                extra["weights_bytes"] = extra["weights_analytic_bytes"] = int(
                    extra["weights_bytes"] * weights
                )
                if kv_packed is not None:
                    extra["kv_quant_bytes_per_token"] = kv_packed
                if (quant, kv_quant) != ("none", "none"):
                    bad = flag_current and i == len(paths) - 1 and quant == "int8wo"
                    extra |= BAD_ACCURACY if bad else OK_ACCURACY
                split.append(c)
        data["benchmarks"] = split
        path.write_text(json.dumps(data))
    return hist


def test_the_report_shows_the_section_and_the_flag_only_with_quantized_cells(tmp_path):
    plain = tmp_path / "plain"
    write_history(plain, 2, seed=5, current=current_spec())
    out_plain, out_quant = tmp_path / "out-plain", tmp_path / "out-quant"
    assert reports_main(["render", "--history", str(plain), "--out", str(out_plain)]) == 0
    html = (out_plain / "index.html").read_text()
    assert "-quant" not in html
    assert "data-quant" not in html
    assert "Accuracy outside the bound" not in html
    assert "Quantization" not in (out_plain / "summary.md").read_text()

    hist = quant_history(tmp_path)
    assert reports_main(["render", "--history", str(hist), "--out", str(out_quant)]) == 0
    html = (out_quant / "index.html").read_text()
    assert 'id="m0-quant"' in html
    assert html.count('class="quant compact"') == 3  # one table per synthetic cell
    assert html.count('<tr data-quant-row="int8wo/hqq4" class="flagged">') == 3
    assert "(~2.00\u00d7)" in html  # int4wo-g32's speed, timed apart from the dense cell
    assert "(0.25\u00d7)" in html  # and its weights
    assert "Accuracy outside the bound" in html
    summary = (out_quant / "summary.md").read_text()
    assert "**Accuracy outside the bound**: 3 quantized cell(s)" in summary
    assert "Quantization: speed, bytes and accuracy" in summary
    assert "| int4wo-g32 / none | " in summary


def test_a_flagged_cell_is_a_line_for_a_human_and_never_decides_the_status(tmp_path, capsys):
    clean = quant_history(tmp_path / "clean", flag_current=False)
    flagged = quant_history(tmp_path / "flagged")
    code_clean = reports_main(["gate", "--history", str(clean)])
    out_clean = capsys.readouterr().out
    code_flagged = reports_main(["gate", "--history", str(flagged)])
    out_flagged = capsys.readouterr().out
    assert code_flagged == code_clean == 0  # PASS both: the flag is said, not judged
    assert "ACCURACY" not in out_clean
    lines = [line for line in out_flagged.splitlines() if line.startswith("ACCURACY ")]
    assert len(lines) == 3  # the three cells' int8wo/hqq4, the current run's only
    assert lines[0].startswith("ACCURACY tiny-llama-cpu-float32-b1-p128-n16-q_int8wo-kvq_hqq4 ")
    assert (
        "int8wo/hqq4: max |\u0394 logit| 3.2 (bound 0.5), top-1 agreement 0.406 (bound 0.8)"
        in (lines[0])
    )
    status_flagged = out_flagged.splitlines()[-1]
    assert out_clean.splitlines()[-1].startswith("gate: PASS: ")
    assert status_flagged.startswith("gate: PASS: ")
    assert "3 quantized cell(s) outside their accuracy bound to check" in status_flagged
    # no verdict judges an accuracy field
    verdict_file = tmp_path / "v.json"
    assert reports_main(["gate", "--history", str(flagged), "--json", str(verdict_file)]) == 0
    capsys.readouterr()
    verdicts = json.loads(verdict_file.read_text())
    assert not any(b["metric"].startswith("accuracy_") for b in verdicts["benchmarks"])
    assert any(b["metric"] == "kv_quant_bytes_per_token" for b in verdicts["benchmarks"])
    (machine,) = verdicts["machines"]
    assert len(machine["accuracy_flags"]) == 3
    assert machine["accuracy_flags"][0]["max_abs_logit_delta"] == 3.2


def test_the_quant_command_prints_the_newest_run_and_refuses_bad_input(tmp_path, capsys):
    hist = quant_history(tmp_path)
    assert reports_main(["quant", str(hist)]) == 0
    out = capsys.readouterr().out
    assert out.count("| quant / kv_quant | prefill tok/s |") == 3
    assert out.count("| int4wo-g32 / none | ") == 3
    assert "(~2.00\u00d7)" in out
    assert "(0.25\u00d7)" in out
    assert out.count("ACCURACY ") == 3  # the newest run is the flagged one
    files = sorted(hist.rglob("*.json"))
    assert reports_main(["quant", str(files[0])]) == 0  # an earlier run alone: nothing flagged
    assert "ACCURACY" not in capsys.readouterr().out
    plain = tmp_path / "plain"
    (path,) = write_history(plain, 1)
    assert reports_main(["quant", str(path)]) == 0
    assert "no quantized cells" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for args in ([str(bad)], [str(tmp_path / "nowhere")], [str(tmp_path / "empty")]):
        (tmp_path / "empty").mkdir(exist_ok=True)
        assert reports_main(["quant", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: "), err
        assert err.count("\n") == 1, err
    # a bad file inside a folder is named, not fatal
    (hist / "junk.json").write_text("{")
    assert reports_main(["quant", str(hist)]) == 0
    assert "skipped" in capsys.readouterr().err
