"""The `engine` axis (DESIGN §14): `-engine_mlx` joins an MLX cell's id, a torch cell's id never
changes (named or not), the axis is validated with the fix, and works in `exclude:` and
`include:` entries; the checked-in MLX matrices load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.matrix.parse import load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[3]
BASE = "tiny-llama-cpu-float32-b1-p8-n4"


def parse(**overrides: Any):
    data: dict[str, Any] = {
        "schema": 1,
        "models": ["tiny-llama"],
        "devices": ["cpu"],
        "dtypes": ["float32"],
        "batch": [1],
        "prompt_len": [8],
        "new_tokens": [4],
        **overrides,
    }
    return parse_matrix(data, path=Path("m.yaml"), known_models=("tiny-llama",))


def test_only_mlx_cells_gain_the_engine_in_their_id():
    assert parse().ids == (BASE,)
    matrix = parse(engine=["torch", "mlx"])
    assert matrix.ids == (BASE, f"{BASE}-engine_mlx")
    torch_cell, mlx_cell = matrix.cells
    assert (torch_cell.engine_name, mlx_cell.engine_name) == ("torch", "mlx")
    assert parse().cells[0].engine_name == "torch"
    assert mlx_cell.axes()["engine"] == "mlx"  # params say the engine; absent means torch
    assert "engine" not in parse().cells[0].axes()
    assert Cell.from_params(mlx_cell.to_params()) == mlx_cell
    assert torch_cell.build_key != mlx_cell.build_key  # each engine builds its own model


def test_the_engine_follows_the_other_run_mode_axes_in_the_id():
    cells = parse(engine=["mlx"], quant=["mlx4"], kv_quant=["mlx8"], kv_group_size=32).cells
    assert cells[0].id == f"{BASE}-q_mlx4-kvq_mlx8-g32-engine_mlx"


def test_an_unknown_engine_is_refused_with_the_closest_name():
    with pytest.raises(MatrixError, match=r"unknown engine 'mlxx' \(did you mean 'mlx'\?\)"):
        parse(engine=["mlxx"])
    with pytest.raises(MatrixError, match="listed twice"):
        parse(engine=["mlx", "mlx"])


def test_exclude_and_include_take_the_engine():
    matrix = parse(engine=["torch", "mlx"], batch=[1, 2], exclude=[{"engine": "mlx", "batch": 2}])
    assert matrix.ids == (BASE, f"{BASE}-engine_mlx", BASE.replace("-b1-", "-b2-"))
    include = {
        "model": "tiny-llama",
        "device": "cpu",
        "dtype": "float32",
        "batch": 1,
        "prompt_len": 16,
        "new_tokens": 4,
        "engine": "mlx",
    }
    assert parse(include=[include]).ids[-1] == "tiny-llama-cpu-float32-b1-p16-n4-engine_mlx"


@pytest.mark.parametrize("name", ["cpu-mlx.yaml", "mps-mlx.yaml", "mps.yaml"])
def test_the_mlx_matrices_load_and_pair_every_mlx_cell_with_a_torch_twin(name):
    matrix = load_matrix(ROOT / "matrix" / name)
    ids = set(matrix.ids)
    mlx = [c for c in matrix.cells if c.engine_name == "mlx"]
    assert mlx, name
    for cell in mlx:
        if cell.quant is None and cell.kv_quant is None:
            assert cell.id.removesuffix("-engine_mlx") in ids, cell.id


def test_naming_the_axis_kept_every_torch_id_of_mps_yaml():
    """matrix/mps.yaml gained `engine: [torch, mlx]`: its torch cells' ids (history keys) are
    exactly the ids the file had without the axis."""
    path = ROOT / "matrix" / "mps.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.pop("engine")
    known = tuple(p.stem for p in (ROOT / "matrix" / "models").glob("*.yaml"))
    before = parse_matrix(data, path=path, known_models=known).ids
    now = load_matrix(path)
    assert tuple(c.id for c in now.cells if c.engine_name == "torch") == before
    assert sum(c.engine_name == "mlx" for c in now.cells) == len(before)
