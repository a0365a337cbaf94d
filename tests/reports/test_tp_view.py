"""The tensor-parallel view (issue 32, build item 6): cells of a `tp` axis against their tp-1 twin.

`reports.render.tp.tp_tables` on synthetic `BenchmarkResult`s with known figures (speed-up and
efficiency, `—` without a tp-1 twin, per-rank maxima, load and run peaks, the ranks' start
skew, the estimate's label),
and end to end on a synthetic history: the report's section only with tp > 1 cells and
`python -m reports tp`, its bad input one line and exit 2.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.cli import main as reports_main
from reports.history.runfile import BenchmarkResult
from reports.render.tp import (
    NO_RATIO,
    cell_text,
    figure_text,
    has_tp_cells,
    markdown,
    rank_text,
    speedup_text,
    tp_of,
    tp_tables,
)
from tests.data.reports.make_history import current_spec, write_history

CELL = {"model": "m", "device": "cpu", "dtype": "float32", "batch": 1, "prompt_len": 8,
        "new_tokens": 4}  # fmt: skip
KIB = 1024


def bench(group, cell=CELL, extra=None, **axes):
    """One benchmark of a cell; `axes` adds params (tp=2, quant=...)."""
    params = {**cell, **axes}
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


def single(prefill, decode, *, cell=CELL, **axes):
    """A single-device cell's prefill and decode (its own bytes, no per-rank lists)."""
    shared = {"weights_bytes": 1000 * KIB, "kv_measured_after_prefill_bytes": 64 * KIB,
              "peak_rss_bytes": 4000 * KIB}  # fmt: skip
    # As the suite writes them: decode's cache ends at P + 1 positions, generate's at P + N - 1
    # (the point the tp cell's final figure is taken at).
    return [
        bench("prefill", cell, {**shared, "prefill_tok_per_s": prefill}, **axes),
        bench("decode", cell, {**shared, "decode_tok_per_s": decode,
                               "kv_measured_final_bytes": 66 * KIB}, **axes),
        bench("generate", cell, {**shared, "kv_measured_final_bytes": 96 * KIB}, **axes),
    ]  # fmt: skip


def tp_cell(tp, prefill, decode, *, cell=CELL, skew=(4e-4, 1.2e-4), peaks=None, **axes):
    """A tp cell: weights and KV split evenly (rank 0 holds 8 KiB more weights: the embedding),
    `skew` the (prefill, decode) median start skew in seconds, `peaks` the run peaks (the load
    peaks are 1 MiB above them)."""
    prefill_skew, decode_skew = skew
    run_peaks = peaks if peaks is not None else [3000 * KIB] * tp
    shared = {
        "tp_size": tp,
        "tp_backend": "gloo",
        "tp_weights_rank_bytes": [1000 * KIB // tp + 8 * KIB] + [1000 * KIB // tp] * (tp - 1),
        "tp_kv_rank_after_prefill_bytes": [64 * KIB // tp] * tp,
        "tp_kv_rank_final_bytes": [96 * KIB // tp] * tp,
        "tp_load_peak_rank_bytes": [None if p is None else p + 1024 * KIB for p in run_peaks],
        "tp_run_peak_rank_bytes": run_peaks,
        "tp_round_clock": "one_clock",
        "tp_allreduce_bytes_per_step_estimate": 2 * (tp - 1) * 4 * KIB // tp,
    }
    return [
        # A prefill record's estimate is per prefill forward (B x P tokens), not per step.
        bench("prefill", cell, {**shared, "prefill_tok_per_s": prefill,
                                "tp_start_skew_s": prefill_skew,
                                "tp_allreduce_bytes_per_step_estimate": 24 * 2 * (tp - 1) * 4
                                * KIB // tp}, tp=tp, **axes),
        bench("decode", cell, {**shared, "decode_tok_per_s": decode,
                               "tp_start_skew_s": decode_skew}, tp=tp, **axes),
    ]  # fmt: skip


def test_speed_up_and_efficiency_are_to_the_single_device_twin():
    cells = [*single(100.0, 10.0), *tp_cell(2, 180.0, 15.0), *tp_cell(4, 300.0, 8.0)]
    (table,) = tp_tables(cells)
    assert table.title == "m cpu float32 b1 p8 n4"
    one, two, four = table.rows
    assert [r.tp for r in table.rows] == [1, 2, 4]
    assert table.twin is one
    assert (one.label, two.label) == ("tp 1 (single device)", "tp 2 (gloo)")
    assert two.speedups["prefill_tok_per_s"] == pytest.approx(1.8)
    assert two.efficiency("prefill_tok_per_s") == pytest.approx(0.9)
    assert two.speedups["decode_tok_per_s"] == pytest.approx(1.5)
    assert two.efficiency("decode_tok_per_s") == pytest.approx(0.75)
    assert four.speedups["decode_tok_per_s"] == pytest.approx(0.8)  # slower than one device
    assert four.efficiency("decode_tok_per_s") == pytest.approx(0.2)
    assert speedup_text(two, "prefill_tok_per_s") == "1.80\u00d7 (90 %)"
    assert speedup_text(four, "decode_tok_per_s") == "0.80\u00d7 (20 %)"
    assert speedup_text(one, "decode_tok_per_s") == "reference"  # the twin: no ratio to itself
    assert one.speedups == {}
    # per rank: the largest rank's figure, weights and KV with their ratio to the twin's
    assert two.values["weights_rank_bytes"] == 508 * KIB
    assert figure_text(two, "weights_rank_bytes") == "508.00 KiB (0.51\u00d7)"
    assert figure_text(two, "kv_rank_after_prefill_bytes") == "32.00 KiB (0.50\u00d7)"
    assert figure_text(four, "kv_rank_final_bytes") == "24.00 KiB (0.25\u00d7)"
    assert figure_text(two, "run_peak_rank_bytes") == "2.93 MiB"  # no ratio: fields may differ
    assert figure_text(two, "load_peak_rank_bytes") == "3.93 MiB"
    assert rank_text(two, "weights_rank_bytes") == "r0 508.00 KiB, r1 500.00 KiB"
    # the twin's own bytes stand for its one rank
    assert figure_text(one, "weights_rank_bytes") == "1000.00 KiB"
    assert figure_text(one, "kv_rank_final_bytes") == "96.00 KiB"
    assert figure_text(one, "run_peak_rank_bytes") == "3.91 MiB"
    assert figure_text(one, "load_peak_rank_bytes") == NO_RATIO  # one device: not read apart
    assert rank_text(one, "weights_rank_bytes") == ""
    # the all-reduce figure is labelled an estimate; the single device has none
    assert figure_text(two, "allreduce_bytes_per_step_estimate") == "\u2248 4.00 KiB"
    assert figure_text(one, "allreduce_bytes_per_step_estimate") == NO_RATIO
    assert two.skew_text == "prefill 0.4 ms, decode 0.12 ms"
    assert one.skew_text == NO_RATIO
    text = markdown([table])
    assert "| tp | prefill tok/s | prefill speed-up (eff.) | decode tok/s |" in text
    assert "all-reduce/step (estimate) |" in text
    assert (
        "| tp 2 (gloo) | 180 tok/s | 1.80\u00d7 (90 %) | 15 tok/s | 1.50\u00d7 (75 %) | "
        "508.00 KiB (0.51\u00d7) | 32.00 KiB (0.50\u00d7) | 48.00 KiB (0.50\u00d7) | 3.93 MiB | "
        "2.93 MiB | prefill 0.4 ms, decode 0.12 ms | \u2248 4.00 KiB |"
    ) in text
    assert "| tp 1 (single device) | 100 tok/s | reference | 10 tok/s | reference |" in text


def test_without_a_tp1_twin_there_is_no_speed_up_never_one():
    (table,) = tp_tables([*tp_cell(2, 180.0, 15.0), *tp_cell(4, 300.0, 20.0)])
    assert table.twin is None
    for row in table.rows:
        assert all(v is None for v in row.speedups.values())
        assert row.efficiency("decode_tok_per_s") is None
        assert speedup_text(row, "decode_tok_per_s") == NO_RATIO
        assert figure_text(row, "kv_rank_final_bytes").endswith("(\u2014)")
    assert "(no tp-1 cell: no speed-up)" in markdown([table])
    assert "1.00\u00d7" not in markdown([table])
    # a twin missing one figure, or a zero one: no speed-up for that figure only
    twin = [bench("prefill", extra={"prefill_tok_per_s": 0.0}), bench("decode")]
    (table,) = tp_tables([*twin, *tp_cell(2, 180.0, 15.0)])
    assert table.rows[1].speedups == {"prefill_tok_per_s": None, "decode_tok_per_s": None}
    assert cell_text(table.rows[1], "speedup:decode_tok_per_s") == NO_RATIO


def test_the_twin_may_name_tp_1_and_a_tp_row_never_borrows_single_device_bytes():
    named = single(100.0, 10.0, tp=1)
    assert tp_of(named[0].params) == 1
    assert tp_of(CELL) == 1
    (table,) = tp_tables([*named, *tp_cell(2, 150.0, 12.0)])
    assert table.twin is not None
    assert table.rows[1].speedups["prefill_tok_per_s"] == pytest.approx(1.5)
    # a tp-2 record with no per-rank lists: no figure, not rank 0's or the global one
    bare = bench("decode", extra={"decode_tok_per_s": 12.0, "weights_bytes": 999}, tp=2)
    (table,) = tp_tables([*single(100.0, 10.0), bare])
    assert table.rows[1].values["weights_rank_bytes"] is None
    assert figure_text(table.rows[1], "weights_rank_bytes") == NO_RATIO
    # ranks without a peak are left out of the max; none at all is no figure
    (table,) = tp_tables(tp_cell(2, 1, 1, peaks=[None, 5 * KIB]))
    assert table.rows[0].values["run_peak_rank_bytes"] == 5 * KIB
    assert rank_text(table.rows[0], "run_peak_rank_bytes") == "r0 n/a, r1 5.00 KiB"
    (table,) = tp_tables(tp_cell(2, 1, 1, peaks=[None, None]))
    assert table.rows[0].values["run_peak_rank_bytes"] is None


def test_a_record_from_before_issue_42_still_reads():
    """One `tp_peak_rank_bytes` (read at the end of the run) and slowest-rank counts: the peak
    shows as the run's, the counts (barrier-exit skew) nowhere, and no load peak or skew."""
    old = [
        bench("decode", extra={"decode_tok_per_s": 9.0, "tp_size": 2, "tp_backend": "gloo",
                               "tp_peak_rank_bytes": [7 * KIB, 6 * KIB],
                               "tp_slowest_rank_counts": [2, 1]}, tp=2),
    ]  # fmt: skip
    (table,) = tp_tables([*single(100.0, 10.0), *old])
    row = table.rows[1]
    assert row.values["run_peak_rank_bytes"] == 7 * KIB
    assert row.values["load_peak_rank_bytes"] is None
    assert row.skew_text == NO_RATIO
    assert "slowest" not in markdown([table])
    assert "(2/3)" not in markdown([table])


def test_ranks_on_several_hosts_are_labelled_per_rank_and_have_no_skew():
    cell = tp_cell(2, 180.0, 15.0, skew=(None, None))
    for b in cell:
        b.extra["tp_round_clock"] = "per_rank"
    (table,) = tp_tables([*single(100.0, 10.0), *cell])
    assert table.rows[1].label == "tp 2 (gloo, per-rank times)"
    assert table.rows[1].skew_text == NO_RATIO


def test_groups_without_tp_cells_make_no_table_and_other_params_split_groups():
    plain = single(100.0, 10.0)
    assert tp_tables(plain) == []
    assert not has_tp_cells(plain)
    assert tp_tables(single(100.0, 10.0, tp=1)) == []  # a tp axis of 1 only: nothing to compare
    other = {**CELL, "prompt_len": 16}
    cells = [
        *single(100.0, 10.0),
        *tp_cell(2, 180.0, 15.0),
        *single(50.0, 5.0, cell=other),  # tp 1 only: no table
        *single(100.0, 10.0, quant="int8wo"),
        *tp_cell(2, 100.0, 20.0, quant="int8wo"),  # its own twin: the same quant at tp 1
    ]
    assert has_tp_cells(cells)
    tables = tp_tables(cells)
    assert [t.title for t in tables] == [
        "m cpu float32 b1 p8 n4",
        "m cpu float32 b1 p8 n4 quant=int8wo",
    ]
    assert tables[1].rows[1].speedups["decode_tok_per_s"] == pytest.approx(2.0)


# -- end to end: a synthetic history whose cells run at tp 1, 2 and 4 ---------------------------

SPEED = {1: 1.0, 2: 1.6, 4: 2.4}  # tok/s factor over tp 1


def tp_history(tmp_path: Path, runs: int = 2, tps=(1, 2, 4)) -> Path:
    """A history whose every cell runs at each of `tps` (known speed factors, even splits)."""
    hist = tmp_path / "tp-hist"
    paths = write_history(hist, runs, seed=5, current=current_spec())
    for path in paths:
        data = json.loads(path.read_text())
        split = []
        for b in data["benchmarks"]:
            for tp in tps:
                c = json.loads(json.dumps(b))
                extra = c["extra_info"]
                if tp > 1:  # a matrix naming the axis: tp 1 is a plain cell here
                    suffix = f"-tp{tp}"
                    c["name"] = b["name"].replace("]", suffix + "]")
                    c["fullname"] = b["fullname"].replace("]", suffix + "]")
                    c["params"] |= {"tp": tp}
                    extra["cell_id"] += suffix

                    def per_rank(key, default, tp=tp, extra=extra):
                        return [int(extra.get(key, default)) // tp] * tp

                    extra |= {
                        "tp_size": tp,
                        "tp_backend": "gloo",
                        "tp_weights_rank_bytes": per_rank("weights_bytes", 4 * KIB),
                        "tp_kv_rank_after_prefill_bytes": per_rank(
                            "kv_measured_after_prefill_bytes", 8 * KIB
                        ),
                        "tp_kv_rank_final_bytes": per_rank("kv_measured_final_bytes", 16 * KIB),
                        "tp_load_peak_rank_bytes": per_rank("peak_rss_bytes", 96 * KIB * tp),
                        "tp_run_peak_rank_bytes": per_rank("peak_rss_bytes", 64 * KIB * tp),
                        "tp_allreduce_bytes_per_step_estimate": 1536,
                    }
                    if extra["measurement"] in ("prefill", "decode"):
                        extra["tp_start_skew_s"] = (
                            2.5e-4 if extra["measurement"] == "decode" else 1e-3
                        )
                for key in ("prefill_tok_per_s", "decode_tok_per_s"):
                    if key in extra:
                        extra[key] *= SPEED[tp]
                c["stats"]["data"] = [t / SPEED[tp] for t in c["stats"]["data"]]
                split.append(c)
        data["benchmarks"] = split
        path.write_text(json.dumps(data))
    return hist


def test_the_report_shows_the_section_only_with_tp_cells(tmp_path):
    plain = tmp_path / "plain"
    write_history(plain, 2, seed=5, current=current_spec())
    out_plain, out_tp = tmp_path / "out-plain", tmp_path / "out-tp"
    assert reports_main(["render", "--history", str(plain), "--out", str(out_plain)]) == 0
    html = (out_plain / "index.html").read_text()
    assert 'id="m0-tp"' not in html
    assert "data-tp" not in html
    assert "Tensor parallel" not in html

    hist = tp_history(tmp_path)
    assert reports_main(["render", "--history", str(hist), "--out", str(out_tp)]) == 0
    html = (out_tp / "index.html").read_text()
    assert 'id="m0-tp"' in html
    assert "Tensor parallel: speed-up over one device and bytes per rank" in html
    assert html.count('class="tp compact"') == 3  # one table per synthetic cell
    assert html.count('<tr data-tp-row="4">') == 3
    assert '1.60\u00d7 <span class="meta">(80 %)</span>' in html  # tp 2's speed-up, efficiency
    assert '2.40\u00d7 <span class="meta">(60 %)</span>' in html  # tp 4's
    assert '322.00 KiB <span class="meta">(0.25\u00d7)</span>' in html  # weights/rank at tp 4
    assert "all-reduce/step (estimate)" in html
    assert "\u2248 1.50 KiB" in html
    assert "prefill 1 ms<br>decode 0.25 ms" in html
    assert 'title="r0 16.00 KiB, r1 16.00 KiB, r2 16.00 KiB, r3 16.00 KiB"' in html
    assert html.count('16.00 KiB <span class="meta">(0.25\u00d7)') == 1  # b1 p128 tp 4, KV


def test_a_history_without_a_twin_says_so_in_the_report(tmp_path):
    hist = tp_history(tmp_path, tps=(2, 4))
    out = tmp_path / "out"
    assert reports_main(["render", "--history", str(hist), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert html.count("no tp-1 cell: no speed-up") == 3
    tables = html.split('<div class="tp-tables">')[1].split("</div>")[0]
    assert "\u00d7" not in tables  # no speed-up, and no weight or KV ratio either
    assert "(\u2014)" in tables


def test_the_tp_command_prints_the_newest_run_and_refuses_bad_input(tmp_path, capsys):
    hist = tp_history(tmp_path)
    assert reports_main(["tp", str(hist)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### ")
    assert out.count("| tp | prefill tok/s | prefill speed-up (eff.) |") == 3
    assert out.count("| tp 1 (single device) | ") == 3
    assert out.count("| tp 4 (gloo) | ") == 3
    assert "1.60\u00d7 (80 %)" in out
    plain = tmp_path / "plain"
    (path,) = write_history(plain, 1)
    assert reports_main(["tp", str(path)]) == 0
    assert "no tensor-parallel cells (no tp > 1)" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    (tmp_path / "empty").mkdir()
    for args in ([str(bad)], [str(tmp_path / "nowhere")], [str(tmp_path / "empty")]):
        assert reports_main(["tp", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: "), err
        assert err.count("\n") == 1, err
    assert reports_main(["tp", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err  # the missing path is named
    # a bad file inside a folder is named, not fatal
    (hist / "junk.json").write_text("{")
    assert reports_main(["tp", str(hist)]) == 0
    assert "skipped" in capsys.readouterr().err


@pytest.mark.browser
def test_the_section_renders_in_a_browser_with_no_script_errors(tmp_path):
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if browser is None:
        pytest.skip("headless Chromium not installed (apt-get install chromium)")
    out = tmp_path / "out"
    assert reports_main(["render", "--history", str(tp_history(tmp_path)), "--out", str(out)]) == 0
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--virtual-time-budget=5000",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        (out / "index.html").as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    box = re.search(r'<div id="js-errors"[^>]*>(.*?)</div>', proc.stdout, re.S)
    assert box is not None
    assert re.findall(r"<li>(.*?)</li>", box.group(1), re.S) == []
    assert 'data-ready="1"' in proc.stdout  # the page's script ran to the end
    assert proc.stdout.count('class="tp compact"') == 3
