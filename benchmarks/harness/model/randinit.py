"""Fast, honest random weights for a transformers model built from a config.

`from_config` spends most of its time drawing ~10^8-10^9 normal samples on the CPU. We keep
transformers' own initialisation (`init_weights`: which tensors get which distribution, norms,
biases, padding rows, RoPE and embedding-scale buffers, weight tying) and replace only the cost:

1. Construct the model with the weight matrices of Linear/Embedding/Conv layers on the meta device
   (registered there as they are created, so torch's default init of them runs on meta for
   free). Every other parameter and all buffers are created on the CPU as transformers does.
2. Materialise: meta parameters become uninitialised tensors on the target device, the rest
   are moved there. Tied parameters stay one tensor.
3. Run transformers' `init_weights()` with `Tensor.normal_`/`uniform_` answered from a random
   pool for tensors of >= 2 dims; then fill from the pool any new tensor that init never wrote
   (a safety net, so no uninitialised memory survives where a model's `_init_weights` skips a
   tensor). Each byte is written once in the usual case.

The pool is 2^20 seeded N(0, 1) or U(0, 1) samples; a tensor gets the pool repeated from a
random offset, scaled to the requested mean/std or range. That is periodic, not i.i.d., which
is irrelevant to speed measurements and keeps logits finite and activations realistic in scale.
It deliberately does not try to produce trainable or statistically independent weights.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

POOL_ELEMENTS = 1 << 20
# std of the safety-net fill when the config names none (transformers' usual default).
_DEFAULT_STD = 0.02


class RandomPool:
    """Seeded normal and uniform pools on one device; fills tensors by periodic copy."""

    def __init__(self, device: torch.device, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        normal = torch.randn(POOL_ELEMENTS, generator=generator, dtype=torch.float32)
        uniform = torch.rand(POOL_ELEMENTS, generator=generator, dtype=torch.float32)
        # Doubled so that any offset in [0, POOL) has POOL contiguous elements after it.
        self._unit = {
            "normal": torch.cat([normal, normal]).to(device),
            "uniform": torch.cat([uniform, uniform]).to(device),
        }
        # Scaled, cast copies per (distribution, scale, shift, dtype): models use a handful.
        self._scaled: dict[tuple[str, float, float, torch.dtype], torch.Tensor] = {}
        self._offsets = random.Random(seed)
        self.filled: set[int] = set()  # data_ptr of every tensor this pool has written

    def normal_(self, tensor: torch.Tensor, mean: float, std: float) -> torch.Tensor:
        """Fill `tensor` in place with pool samples scaled to N(mean, std)."""
        return self._fill(tensor, self._source("normal", std, mean, tensor.dtype))

    def uniform_(self, tensor: torch.Tensor, low: float, high: float) -> torch.Tensor:
        """Fill `tensor` in place with pool samples scaled to U(low, high)."""
        return self._fill(tensor, self._source("uniform", high - low, low, tensor.dtype))

    def _source(self, kind: str, scale: float, shift: float, dtype: torch.dtype) -> torch.Tensor:
        key = (kind, scale, shift, dtype)
        if key not in self._scaled:
            self._scaled[key] = (self._unit[kind] * scale + shift).to(dtype)
        return self._scaled[key]

    def _fill(self, tensor: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
        n = tensor.numel()
        self.filled.add(tensor.data_ptr())
        if n == 0:
            return tensor
        offset = self._offsets.randrange(POOL_ELEMENTS)
        period = min(n, POOL_ELEMENTS)
        source = scaled[offset : offset + period]
        target = tensor if tensor.is_contiguous() else torch.empty_like(tensor)
        flat = target.view(-1)
        rows = n // period
        with torch.no_grad():
            # One broadcast copy for all whole periods, one for the remainder.
            flat[: rows * period].view(rows, period).copy_(source.expand(rows, period))
            if n > rows * period:
                flat[rows * period :].copy_(source[: n - rows * period])
            if target is not tensor:
                tensor.copy_(target)
        return tensor


def _matrix_modules() -> tuple[type[nn.Module], ...]:
    # The weight-holding layers whose `weight` every transformers `_init_weights` re-draws. A
    # parameter a model registers itself (Mamba's `A_log`, MoE expert banks) keeps the value its
    # `__init__` gives it, because some versions' `_init_weights` never set it again.
    return (nn.Linear, nn.Embedding, nn.modules.conv._ConvNd, Conv1D)


@contextmanager
def matrices_on_meta() -> Iterator[None]:
    """Register the `weight` of Linear/Embedding/Conv layers on the meta device as it is created.

    Everything else (biases, norms, parameters models register themselves, all buffers) is
    created on the CPU exactly as transformers creates it.
    """
    original = nn.Module.register_parameter
    matrix_modules = _matrix_modules()

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if (
            param is not None
            and name == "weight"
            and isinstance(module, matrix_modules)
            and param.dim() >= 2
            and not param.is_meta
        ):
            param = type(param)(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def materialise_(model: nn.Module, device: torch.device) -> list[torch.Tensor]:
    """Move `model` to `device`; meta tensors become uninitialised. Returns those new tensors.

    Tied parameters (the same Parameter object in two modules) stay one Parameter.
    """
    fresh: list[torch.Tensor] = []
    params: dict[int, nn.Parameter] = {}
    buffers: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) not in params:
                if param.is_meta:
                    data = torch.empty_like(param, device=device)
                    fresh.append(data)
                else:
                    data = param.detach().to(device)
                params[id(param)] = nn.Parameter(data, requires_grad=param.requires_grad)
            module._parameters[name] = params[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is None:
                continue
            if id(buffer) not in buffers:
                if buffer.is_meta:
                    moved = torch.empty_like(buffer, device=device)
                    fresh.append(moved)
                else:
                    moved = buffer.to(device)
                buffers[id(buffer)] = moved
            module._buffers[name] = buffers[id(buffer)]
    return fresh


@contextmanager
def pooled_random_draws(pool: RandomPool) -> Iterator[None]:
    """Answer `Tensor.normal_`/`uniform_` on tensors of >= 2 dims from `pool`.

    torch.nn.init and transformers' init functions both end in these two tensor methods, so this
    keeps every model's own choice of distribution and parameters.
    """
    original_normal: Callable[..., torch.Tensor] = torch.Tensor.normal_
    original_uniform: Callable[..., torch.Tensor] = torch.Tensor.uniform_

    def normal_(
        self: torch.Tensor, mean: float = 0.0, std: float = 1.0, **kwargs: Any
    ) -> torch.Tensor:
        if self.dim() >= 2 and not self.is_meta:
            return pool.normal_(self, float(mean), float(std))
        return original_normal(self, mean, std, **kwargs)

    def uniform_(
        self: torch.Tensor, from_: float = 0.0, to: float = 1.0, **kwargs: Any
    ) -> torch.Tensor:
        if self.dim() >= 2 and not self.is_meta:
            return pool.uniform_(self, float(from_), float(to))
        return original_uniform(self, from_, to, **kwargs)

    torch.Tensor.normal_ = normal_  # type: ignore[method-assign,assignment]
    torch.Tensor.uniform_ = uniform_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.normal_ = original_normal  # type: ignore[method-assign]
        torch.Tensor.uniform_ = original_uniform  # type: ignore[method-assign]


@contextmanager
def _one_cpu_thread(device: torch.device) -> Iterator[None]:
    """Run the CPU fills on one thread.

    The fills are a few hundred memory-bound copies; one thread saturates memory bandwidth on
    its own, while a parallel region per copy waits at its barrier for every thread to be
    scheduled, which on a busy machine costs milliseconds per copy (seconds per model).
    """
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def initializer_std(config: Any) -> float:
    """The config's weight std (`initializer_range` and its aliases), else 0.02."""
    for name in ("initializer_range", "init_std", "initializer_factor"):
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return _DEFAULT_STD


def fill_random_(model: Any, device: torch.device, seed: int) -> None:
    """Materialise a model built under `matrices_on_meta()` on `device` with honest random values.

    `model` is a transformers `PreTrainedModel`. Afterwards every parameter and buffer holds
    values transformers' own init would produce (>= 2-D draws taken from the pool), and tied
    weights are tied.
    """
    pool = RandomPool(device, seed)
    fresh = materialise_(model, device)
    versions = [t._version for t in fresh]
    for module in model.modules():
        # post_init ran once during construction and marked modules done; run it again for real.
        if hasattr(module, "_is_hf_initialized"):
            del module._is_hf_initialized
    with torch.no_grad(), pooled_random_draws(pool), _one_cpu_thread(device):
        model.init_weights()
    # Safety net: a new tensor that transformers' init never wrote (neither through the pool nor
    # any other in-place op) would otherwise stay uninitialised memory. Writing it here, after
    # init, touches every byte once in the usual case instead of twice.
    std = initializer_std(model.config)
    for tensor, version in zip(fresh, versions, strict=True):
        if tensor._version == version and tensor.data_ptr() not in pool.filled:
            pool.normal_(tensor, 0.0, std)
    model.tie_weights()
