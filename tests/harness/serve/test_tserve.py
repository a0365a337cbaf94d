"""`tserve`: the measured server is `transformers serve` as users run it unless a calibration run
slows it; then every outermost forward waits its fraction."""

from __future__ import annotations

import time

import pytest
import torch

from benchmarks.harness.serve import tserve


class _Cli:
    def __init__(self) -> None:
        self.argv: list[str] | None = None

    def __call__(self, argv: list[str]) -> None:
        self.argv = argv


@pytest.fixture
def hooks(monkeypatch):
    installed: list[float] = []
    monkeypatch.setattr(tserve, "install_slowdown", installed.append)
    cli = _Cli()
    transformers_cli = pytest.importorskip("transformers.cli.transformers")
    monkeypatch.setattr(transformers_cli, "app", cli)
    return installed, cli


def test_slowdown_zero_installs_no_hook_and_hands_the_rest_to_transformers_serve(hooks):
    installed, cli = hooks
    tserve.main(["--slowdown", "0", "--", "/m", "--port", "1"])
    assert installed == []
    assert cli.argv == ["serve", "/m", "--port", "1"]


def test_a_calibration_slowdown_installs_its_hook(hooks):
    installed, cli = hooks
    tserve.main(["--slowdown", "0.3", "--", "/m"])
    assert installed == [0.3]
    assert cli.argv == ["serve", "/m"]


def test_the_hook_slows_an_outermost_generative_forward_by_its_fraction():
    transformers = pytest.importorskip("transformers")
    before = dict(torch.nn.modules.module._global_forward_hooks)
    pre_before = dict(torch.nn.modules.module._global_forward_pre_hooks)

    class Tiny(torch.nn.Module, transformers.GenerationMixin):
        def forward(self, x):
            deadline = time.perf_counter() + 0.02
            while time.perf_counter() < deadline:
                pass
            return x

    model = Tiny()
    model.weight = torch.nn.Parameter(torch.zeros(1))
    try:
        tserve.install_slowdown(0.5)
        start = time.perf_counter()
        model(torch.zeros(1))
        took = time.perf_counter() - start
    finally:
        torch.nn.modules.module._global_forward_hooks.clear()
        torch.nn.modules.module._global_forward_hooks.update(before)
        torch.nn.modules.module._global_forward_pre_hooks.clear()
        torch.nn.modules.module._global_forward_pre_hooks.update(pre_before)
    # 20 ms + 0.5 x the forward it measured (a preempted forward waits more, never less)
    assert 0.0295 < took < 0.2
