"""The torch-vs-MLX view (issue 45, build item 4): each cell on both engines side by side.

`reports.render.engines.engine_tables` on synthetic `BenchmarkResult`s with known figures (the
ratio MLX / torch, the better engine and by how much, `—` for a missing side or two different
memory counters, `engine` absent meaning torch), and end to end on a synthetic history: the
report's section and summary.md only with MLX cells, and `python -m reports engines`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.cli import main as reports_main
from reports.history.runfile import BenchmarkResult
from reports.render.engines import (
    NO_RATIO,
    better_text,
    engine_tables,
    figure_text,
    has_mlx_cells,
    markdown,
    ratio_text,
    verdict_text,
)
from tests.data.reports.make_history import current_spec, write_history

CELL = {"model": "m", "device": "mps", "dtype": "float16", "batch": 1, "prompt_len": 128,
        "new_tokens": 8}  # fmt: skip


def bench(group, extra, **axes):
    params = {**CELL, **axes}
    cell_id = "-".join(str(v) for v in params.values())
    name = f"test_{group}[{cell_id}]"
    return BenchmarkResult(
        fullname=f"benchmarks/test_{group}.py::{name}",
        name=name,
        group=group,
        params=params,
        rounds_s=(0.01,),
        extra={"measurement": group, "cell_id": cell_id, **extra},
    )


def cell(*, ttft, step, kv, peak_field, peak, **axes):
    prefill_s = ttft * 0.9
    return [
        bench("prefill", {"prefill_s": prefill_s, "prefill_tok_per_s": 128 / prefill_s}, **axes),
        bench("decode", {"decode_step_s": step, "decode_tok_per_s": 1 / step,
                         "decode_bytes_per_s": 1e9 * 0.01 / step,
                         "decode_pct_of_peak_bandwidth": 40.0 * 0.01 / step}, **axes),
        bench("generate", {"ttft_s": ttft, "tpot_s": step * 1.1, "kv_measured_final_bytes": kv,
                           peak_field: peak, "peak_rss_bytes": 5 * peak}, **axes),
    ]  # fmt: skip


def pair(**mlx_overrides):
    torch_cell = cell(
        ttft=0.100, step=0.020, kv=135 * 1024, peak_field="peak_allocated_sampled_bytes", peak=1e9
    )
    mlx = {"ttft": 0.050, "step": 0.025, "kv": 256 * 1024, "peak_field": "peak_allocated_bytes",
           "peak": 8e8, **mlx_overrides}  # fmt: skip
    return [*torch_cell, *cell(**mlx, engine="mlx")]


def test_each_figure_has_the_ratio_and_the_better_engine():
    (table,) = engine_tables(pair())
    assert table.title == "m mps float16 b1 p128 n8"
    assert table.cells == {"torch": "m-mps-float16-1-128-8", "mlx": "m-mps-float16-1-128-8-mlx"}
    ttft, step, tok = table.row("ttft_s"), table.row("decode_step_s"), table.row("decode_tok_per_s")
    assert ttft.ratio == pytest.approx(0.5)
    assert better_text(ttft) == "MLX 2.00\u00d7"  # half the time: MLX twice as fast
    assert step.ratio == pytest.approx(1.25)
    assert better_text(step) == "torch 1.25\u00d7"
    assert better_text(tok) == "torch 1.25\u00d7"  # higher is better: the same verdict
    assert ratio_text(tok) == "0.80\u00d7"
    kv = table.row("kv_final_bytes")
    assert (figure_text(kv, "torch"), figure_text(kv, "mlx")) == ("135.00 KiB", "256.00 KiB")
    assert better_text(kv) == "torch 1.90\u00d7"
    assert verdict_text(table) == "faster: prefill MLX 2.00\u00d7, decode torch 1.25\u00d7"
    assert figure_text(ttft, "torch") == "100 ms"
    assert figure_text(table.row("decode_bytes_per_s"), "mlx") == "0.4 GB/s"


def test_two_different_memory_counters_get_no_ratio_but_the_rss_does():
    (table,) = engine_tables(pair())
    peak = table.row("peak_memory_bytes")
    assert peak.fields == {"torch": "peak_allocated_sampled_bytes", "mlx": "peak_allocated_bytes"}
    assert (peak.ratio, ratio_text(peak), better_text(peak)) == (None, NO_RATIO, NO_RATIO)
    assert "different counters, no ratio" in markdown([table])
    rss = table.row("peak_rss_bytes")
    assert rss.ratio == pytest.approx(0.8)
    (same,) = engine_tables(pair(peak_field="peak_allocated_sampled_bytes"))
    assert same.row("peak_memory_bytes").ratio == pytest.approx(0.8)


def test_a_missing_figure_is_a_dash_never_a_ratio_of_one():
    benches = [b for b in pair() if not (b.params.get("engine") and b.group == "generate")]
    (table,) = engine_tables(benches)
    ttft = table.row("ttft_s")
    assert ttft.values["mlx"] is None
    assert (ratio_text(ttft), better_text(ttft), figure_text(ttft, "mlx")) == (
        NO_RATIO,
        NO_RATIO,
        "n/a",
    )
    assert verdict_text(table) == "faster: decode torch 1.25\u00d7"


def test_only_groups_with_both_engines_make_a_table_and_a_named_torch_is_torch():
    torch_only = cell(ttft=0.1, step=0.02, kv=1, peak_field="peak_rss_bytes", peak=1)
    assert engine_tables(torch_only) == []
    assert not has_mlx_cells(torch_only)
    named = [
        *cell(ttft=0.1, step=0.02, kv=1, peak_field="peak_rss_bytes", peak=1, engine="torch"),
        *cell(ttft=0.1, step=0.02, kv=1, peak_field="peak_rss_bytes", peak=1, engine="mlx"),
        *cell(ttft=0.1, step=0.02, kv=1, peak_field="peak_rss_bytes", peak=1, prompt_len=1024,
              engine="mlx"),  # no torch twin: no table
    ]  # fmt: skip
    tables = engine_tables(named)
    assert [t.title for t in tables] == ["m mps float16 b1 p128 n8"]
    assert better_text(tables[0].row("ttft_s")) == "same"


def _engine_history(tmp_path: Path) -> Path:
    """A synthetic history whose current run holds every cell twice: torch, and MLX 40 % faster
    to the first token and with its KV at whole steps of 256 positions."""
    hist = tmp_path / "history"
    paths = write_history(hist, 2, seed=5, current=current_spec())
    data = json.loads(paths[-1].read_text())
    twins = []
    for b in data["benchmarks"]:
        twin = json.loads(json.dumps(b))
        twin["name"] = b["name"].replace("]", "-engine_mlx]")
        twin["fullname"] = b["fullname"].replace("]", "-engine_mlx]")
        twin["params"] |= {"engine": "mlx"}
        extra = twin["extra_info"]
        extra["cell_id"] += "-engine_mlx"
        extra["engine"] = "mlx"
        if "ttft_s" in extra:
            extra["ttft_s"] *= 0.6
        if "kv_measured_final_bytes" in extra:
            extra["kv_used_measured_bytes"] = extra["kv_measured_final_bytes"]
            extra["kv_measured_final_bytes"] = 1 << 20
        twins.append(twin)
    data["benchmarks"] += twins
    paths[-1].write_text(json.dumps(data))
    return hist


def test_the_report_and_summary_show_the_section_only_with_mlx_cells(tmp_path):
    plain = tmp_path / "plain"
    write_history(plain, 2, seed=5, current=current_spec())
    out = tmp_path / "out-plain"
    reports_main(["render", "--history", str(plain), "--out", str(out)])
    assert "torch vs MLX" not in (out / "index.html").read_text()
    assert "torch vs MLX" not in (out / "summary.md").read_text()

    out = tmp_path / "out"
    reports_main(["render", "--history", str(_engine_history(tmp_path)), "--out", str(out)])
    html = (out / "index.html").read_text()
    assert 'id="m0-engines"' in html
    tables = html.count('class="engines compact"')
    assert tables >= 1
    assert html.count('<tr data-engine-row="ttft_s">') == tables
    assert "faster: prefill MLX 1.67\u00d7" in html
    summary = (out / "summary.md").read_text()
    assert "torch vs MLX: the same cells on both engines" in summary
    assert "prefill MLX 1.67\u00d7" in summary


def test_the_engines_command_prints_the_newest_run(tmp_path, capsys):
    hist = _engine_history(tmp_path)
    assert reports_main(["engines", str(hist)]) == 0
    printed = capsys.readouterr().out
    assert "| TTFT |" in printed
    assert "MLX 1.67\u00d7" in printed
    plain = tmp_path / "plain"
    (path,) = write_history(plain, 1)
    assert reports_main(["engines", str(path)]) == 0
    assert "no cell ran on both engines" in capsys.readouterr().out
    assert reports_main(["engines", str(tmp_path / "missing")]) == 2
