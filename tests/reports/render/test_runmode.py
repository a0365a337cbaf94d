"""The per-cell run-mode comparison (decode tok/s by attention x cache x compile).

The pure function `reports.render.runmode.comparison_tables` on synthetic `BenchmarkResult`s with
known
values, its Markdown, `python -m reports runmode`, and the report sections built from it (the
HTML "Run modes" section, the summary.md tables, the "now" table's axis columns, grid rows).
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from reports.cli import main as reports_main
from reports.history.runfile import BenchmarkResult
from reports.render.runmode import UNSET, comparison_tables, entry_text, has_run_modes, markdown
from tests.data.reports.make_history import current_spec, write_history

CELL = {"model": "m", "device": "cpu", "dtype": "float32", "batch": 1, "prompt_len": 8,
        "new_tokens": 4}  # fmt: skip


def bench(group, step_s, compile_s=None, cell=CELL, **mode):
    info = {"decode_step_s": step_s, "decode_tok_per_s": 1 / step_s}
    if compile_s is not None:
        info["compile_s"] = compile_s
    name = f"test_{group}[{'-'.join(str(v) for v in {**cell, **mode}.values())}]"
    return BenchmarkResult(
        fullname=f"benchmarks/test_{group}.py::{name}",
        name=name,
        group=group,
        params={**cell, **mode},
        rounds_s=(step_s,),
        extra=info,
    )


def test_one_table_per_cell_rows_attention_x_cache_columns_compile_in_axis_order():
    benchmarks = [
        bench("decode", 0.05, 30.0, attention="sdpa", cache="dynamic", compile="default"),
        bench("decode", 0.2, attention="eager", cache="static", compile="none"),
        bench("decode", 0.1, attention="sdpa", cache="dynamic", compile="none"),
        bench("prefill", 9.0, attention="eager", cache="static", compile="none"),  # not decode
        bench("decode", 1.0),  # no run mode: not a run-mode cell
    ]
    (table,) = comparison_tables(benchmarks)
    assert table.title == "m cpu float32 b1 p8 n4"
    assert table.rows == [("sdpa", "dynamic"), ("eager", "static")]  # documented order
    assert table.columns == ["none", "default"]
    compiled = table.entry("sdpa", "dynamic", "default")
    assert compiled is not None
    assert compiled.decode_tok_per_s == pytest.approx(20.0)
    assert compiled.compile_s == 30.0
    assert compiled.speedup_vs_none == pytest.approx(2.0)  # 20 tok/s over 10 tok/s
    eager = table.entry("eager", "static", "none")
    assert eager is not None
    assert eager.speedup_vs_none is None
    assert table.entry("eager", "static", "default") is None
    text = markdown([table])
    assert "| attention x cache | compile none | compile default |" in text
    assert (
        "| sdpa x dynamic | 10.0 tok/s (100.00 ms) "
        "| 20.0 tok/s (50.00 ms; 2.00x vs none; compile_s 30.0) |" in text
    )
    assert "| eager x static | 5.0 tok/s (200.00 ms) | n/a |" in text


@pytest.mark.parametrize("seed", range(20))
def test_speedups_are_the_ratio_of_the_recorded_rates_over_random_cells(seed):
    rng = random.Random(seed)
    steps = {
        (a, c, m): rng.uniform(1e-4, 1e-1)
        for a in ("sdpa", "eager")
        for c in ("dynamic", "static")
        for m in ("none", "default", "max-autotune")
        if rng.random() < 0.8
    }
    benchmarks = [
        bench("decode", s, 1.0 if m != "none" else None, attention=a, cache=c, compile=m)
        for (a, c, m), s in steps.items()
    ]
    rng.shuffle(benchmarks)
    tables = comparison_tables(benchmarks)
    assert len(tables) == (1 if steps else 0)
    for (a, c, m), s in steps.items():
        entry = tables[0].entry(a, c, m)
        assert entry is not None
        assert entry.decode_step_s == s
        none = steps.get((a, c, "none"))
        if m == "none" or none is None:
            assert entry.speedup_vs_none is None
        else:
            assert entry.speedup_vs_none == pytest.approx(none / s)  # tok/s = 1 / step


def test_cells_differing_outside_the_run_mode_get_their_own_tables_and_unset_axes_show():
    other = {**CELL, "prompt_len": 16, "max_cache_len": 64}
    tables = comparison_tables(
        [bench("decode", 0.5, compile="default"), bench("decode", 0.5, cell=other, cache="static")]
    )
    assert [t.title for t in tables] == ["m cpu float32 b1 p16 n4 max_cache_len=64",
                                         "m cpu float32 b1 p8 n4"]  # fmt: skip
    assert tables[1].rows == [(UNSET, UNSET)]
    assert tables[0].columns == [UNSET]
    assert has_run_modes([bench("decode", 0.5, cache="static")])
    assert not has_run_modes([bench("decode", 0.5)])


def test_entries_without_figures_read_n_a():
    assert entry_text(None) == "n/a"
    empty = BenchmarkResult("f", "n", "decode", {**CELL, "cache": "static"}, (1.0,), {})
    (table,) = comparison_tables([empty])
    assert entry_text(table.entry(UNSET, "static", UNSET)) == "n/a"


def run_mode_history(tmp_path: Path) -> Path:
    """A two-run synthetic history whose cells are split into 4 run modes each (known rates).

    The decode rate of a mode is the cell's synthetic rate times FACTORS[mode]; compiled modes
    record compile_s = 12.5 s.
    """
    hist = tmp_path / "hist"
    paths = write_history(hist, 1, seed=5, current=current_spec())
    for path in paths:
        data = json.loads(path.read_text())
        split = []
        for b in data["benchmarks"]:
            for (cache, mode), factor in FACTORS.items():
                suffix = f"-attn_sdpa-cache_{cache}-compile_{mode}"
                c = json.loads(json.dumps(b))
                c["name"] = b["name"].replace("]", suffix + "]")
                c["fullname"] = b["fullname"].replace("]", suffix + "]")
                c["params"] |= {"attention": "sdpa", "cache": cache, "compile": mode}
                c["extra_info"]["cell_id"] = c["extra_info"]["cell_id"] + suffix
                if "decode_tok_per_s" in c["extra_info"]:
                    c["extra_info"]["decode_tok_per_s"] *= factor
                    c["extra_info"]["decode_step_s"] /= factor
                if mode != "none":
                    c["extra_info"]["compile_s"] = 12.5
                split.append(c)
        data["benchmarks"] = split
        data["machine_info"]["phasebench"].pop("planned", None)
        path.write_text(json.dumps(data))
    return hist


FACTORS = {("dynamic", "none"): 1.0, ("dynamic", "default"): 2.0,
           ("static", "none"): 0.5, ("static", "default"): 3.0}  # fmt: skip


def test_the_report_shows_the_run_mode_section_only_with_run_mode_axes(tmp_path):
    plain = tmp_path / "plain"
    write_history(plain, 2, seed=5, current=current_spec())
    out_plain, out_modes = tmp_path / "out-plain", tmp_path / "out-modes"
    assert reports_main(["render", "--history", str(plain), "--out", str(out_plain)]) == 0
    html = (out_plain / "index.html").read_text()
    assert "-runmodes" not in html
    assert "data-runmode" not in html
    assert "Run modes" not in (out_plain / "summary.md").read_text()

    hist = run_mode_history(tmp_path)
    assert reports_main(["render", "--history", str(hist), "--out", str(out_modes)]) == 0
    html = (out_modes / "index.html").read_text()
    assert 'id="m0-runmodes"' in html
    assert html.count('class="runmode compact"') == 3  # one table per synthetic cell
    assert "<th>attention</th><th>cache</th><th>compile</th>" in html  # the now table's columns
    assert "compile 12.5 s" in html
    assert "6.00\u00d7 vs none" in html
    # the grid: run modes are rows of one panel, in axis order (dynamic before static, none first)
    grids = re.findall(r'<table class="grid compact" data-grid="([^"]+)"[^>]*>(.*?)</table>', html,
                       re.S)  # fmt: skip
    assert not any("cache=" in title for title, _ in grids)
    decode = next(body for title, body in grids if title.startswith("decode"))
    rows = re.findall(r"<tr><th>tiny-llama \((.*?)\)</th>", decode)
    x = " \u00d7 "
    assert rows == [x.join(("sdpa", c, f"compile {m}")) for c, m in FACTORS]
    summary = (out_modes / "summary.md").read_text()
    assert "Run modes: decode tok/s by attention \u00d7 cache \u00d7 compile" in summary
    assert "| sdpa \u00d7 static |" in summary
    assert "2.00x vs none; compile_s 12.5" in summary  # dynamic: 2.0 over 1.0


def test_the_runmode_command_prints_tables_and_refuses_unusable_files(tmp_path, capsys):
    hist = run_mode_history(tmp_path)
    files = sorted(hist.rglob("*.json"))
    assert reports_main(["runmode", str(files[-1])]) == 0
    out = capsys.readouterr().out
    assert out.count("| attention x cache | compile none | compile default |") == 3
    rates = [float(x) for x in re.findall(r"\| sdpa x static \| ([\d.]+) tok/s", out)]
    assert rates
    assert all(math.isfinite(r) and r > 0 for r in rates)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert reports_main(["runmode", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    plain = tmp_path / "plain"
    (path,) = write_history(plain, 1)
    assert reports_main(["runmode", str(path)]) == 0
    assert "no run-mode cells" in capsys.readouterr().out
