"""Can this machine and this transformers run a model tensor-parallel, and how is it loaded?

* `tp_loading()`: how the installed transformers loads a model with its TP plan, or None.
  5.x takes `distributed_config=DistributedConfig(tp_size=N)` (5.24 still accepts
  `tp_plan="auto"` but warns: "deprecated and will be removed in v5.18"); releases whose
  `DistributedConfig` has no `tp_size` but whose configs carry `base_model_tp_plan` (4.5x) take
  `tp_plan="auto"` (documented from 4.49; FACTS §7b ran 4.57). 4.46 has neither: no config
  class carries a plan and `from_pretrained` knows no `tp_plan`, so every tp cell skips there.
  Detected by feature, not by version number, so a backport or a rename shows as what it is.
* `tp_plan_for(config)`: the model type's `base_model_tp_plan` class attribute (the plan
  `from_pretrained` would apply); None: the model type has none (GPT-2, Falcon in 5.24).
* `tp_skip_reason(...)`: the collection-time reason a tp cell cannot run, or None. In order:
  no TP in this transformers; no plan for the model type; too few devices (CUDA: one rank per
  visible device; CPU: gloo, `threads_per_rank = cores // tp` must be >= 1, and not on an MPS
  host unless asked, `cpuranks.mac_host_reason`; MPS: no backend);
  query or KV heads the plan cannot split (`bytes.per_rank_kv`). The memory fit is apart
  (`bytes.rank_fit_estimate`): it builds the architecture on the meta device.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Literal

import torch
import transformers
from packaging.version import Version

from benchmarks.harness.cache.kv import text_config
from benchmarks.harness.device.cpustate import allowed_cpus
from benchmarks.harness.errors import KVError
from benchmarks.harness.model.models import DTYPE_KWARG_SINCE
from benchmarks.harness.tp.bytes import TPError, per_rank_kv
from benchmarks.harness.tp.cpuranks import mac_host_reason
from benchmarks.harness.tp.timing import threads_per_rank

_TRANSFORMERS_VERSION = Version(transformers.__version__)


@dataclass(frozen=True)
class TPLoading:
    """How `from_pretrained` is told to apply the model's TP plan in this transformers."""

    kwarg: Literal["distributed_config", "tp_plan"]
    transformers_version: str

    def from_pretrained_kwargs(self, world: int, dtype: torch.dtype) -> dict[str, Any]:
        """The kwargs that load the model sharded over `world` ranks, in `dtype`."""
        dtype_kwarg = "dtype" if _TRANSFORMERS_VERSION >= DTYPE_KWARG_SINCE else "torch_dtype"
        kwargs: dict[str, Any] = {dtype_kwarg: dtype}
        if self.kwarg == "distributed_config":
            kwargs["distributed_config"] = _distributed_config_class()(tp_size=world)
        else:
            kwargs["tp_plan"] = "auto"
        return kwargs


def _distributed_config_class() -> Any:
    # Looked up by name: the module is absent in 4.46, and its export is untyped in 5.x.
    try:
        module = importlib.import_module("transformers.distributed")
    except ImportError:  # 4.46: no transformers.distributed at all
        return None
    return getattr(module, "DistributedConfig", None)


def _distributed_config_fields() -> set[str]:
    config_class = _distributed_config_class()
    if config_class is None or not dataclasses.is_dataclass(config_class):
        return set()
    return {f.name for f in dataclasses.fields(config_class)}


def tp_loading() -> TPLoading | None:
    """The TP loading form of the installed transformers (module docstring), or None."""
    version = transformers.__version__
    if "tp_size" in _distributed_config_fields():
        return TPLoading("distributed_config", version)
    if hasattr(transformers.PretrainedConfig, "base_model_tp_plan"):
        return TPLoading("tp_plan", version)
    return None


def too_old_reason() -> str:
    """Why the installed transformers cannot run a tp cell (when `tp_loading()` is None)."""
    return (
        f"transformers {transformers.__version__} cannot load a model tensor-parallel (no "
        "`base_model_tp_plan` on its configs, no `tp_plan` in `from_pretrained`; TP loading is "
        "documented from 4.49, phasebench checked 4.57 and 5.24): install a newer transformers"
    )


def tp_plan_for(config: Any) -> dict[str, str] | None:
    """The model type's TP plan, read from its config class (None: it has none)."""
    cfg = text_config(config)
    plan = getattr(type(cfg), "base_model_tp_plan", None)
    if plan is None:
        plan = getattr(cfg, "base_model_tp_plan", None)
    return dict(plan) if plan else None


def device_count(device_type: str) -> int:
    """Devices one rank each can take: visible CUDA devices; CPU cores for `cpu`."""
    if device_type == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_type == "cpu":
        return len(allowed_cpus())
    return 0


def _device_reason(tp: int, device_type: str, count: int, mps_host: bool) -> str | None:
    if device_type == "cuda":
        if count < tp:
            return (
                f"tp {tp} needs {tp} CUDA devices (one rank each), {count} visible; lower tp "
                "or run on a machine with more GPUs"
            )
        return None
    if device_type == "cpu":
        if threads_per_rank(count, tp) == 0:
            return (
                f"tp {tp} on CPU gives each rank {count} // {tp} = 0 threads ({count} cores "
                "allowed); lower tp to at most the core count"
            )
        return mac_host_reason(mps_host, tp)
    return (
        f"tp {tp} on {device_type}: phasebench runs tensor parallel on cuda (NCCL) or cpu "
        "(gloo) only"
    )


def _heads_reason(config: Any, plan: dict[str, str], tp: int) -> str | None:
    cfg = text_config(config)
    heads = getattr(cfg, "num_attention_heads", None)
    if isinstance(heads, int) and heads % tp:
        return (
            f"num_attention_heads {heads} is not a multiple of tp {tp}: the plan splits the "
            f"query heads evenly; use a tp that divides {heads}"
        )
    try:
        per_rank_kv(config, plan, world=tp, dtype=torch.float32, batch=1, seq_len=1)
    except (TPError, KVError) as error:
        return str(error)
    return None


def tp_skip_reason(
    config: Any,
    *,
    tp: int,
    device_type: str,
    loading: TPLoading | None,
    count: int,
    mps_host: bool = False,
) -> str | None:
    """Why a cell of `config` at `tp` cannot run here, or None (module docstring's order).

    `loading` is `tp_loading()`, `count` is `device_count(device_type)` and `mps_host` is
    `torch.backends.mps.is_available()`, passed in so the rule is a pure function of them.
    """
    if tp < 1:
        return f"tp is {tp}; use 1, 2, 4 or 8"
    if tp == 1:
        return None
    if loading is None:
        return too_old_reason()
    plan = tp_plan_for(config)
    if plan is None:
        model_type = getattr(text_config(config), "model_type", "?")
        return (
            f"model type {model_type!r} has no tensor-parallel plan (`base_model_tp_plan`) in "
            f"transformers {transformers.__version__}; run it at tp 1 or pick a model that has one"
        )
    device = _device_reason(tp, device_type, count, mps_host)
    if device is not None:
        return device
    return _heads_reason(config, plan, tp)
