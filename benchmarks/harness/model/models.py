"""Model files (`matrix/models/<name>.yaml`) and building the models they describe.

A model file (schema 1) names its source:

* `source: config` with `config:` a Hugging Face `config.json` written as YAML (`model_type`
  included): the architecture with random weights, built fast by `randinit` (parameters of
  >= 2 dims born on the meta device, then filled on the target device; never uninitialised).
* `source: checkpoint` with `checkpoint:` a local directory or a hub id already in the local
  Hugging Face cache. Loading is offline (`local_files_only=True`): nothing is downloaded.

`build_model(..., attention=...)` passes `attn_implementation` through (the matrix's
`attention` axis, DESIGN §9); None keeps transformers' default kernel. It deliberately does not
download anything, choose attention kernels itself, or quantise weights.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import transformers
import yaml
from packaging.version import Version
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from benchmarks.harness.errors import ModelError
from benchmarks.harness.model.randinit import fill_random_, matrices_on_meta

MODELS_DIR = Path(__file__).resolve().parents[3] / "matrix" / "models"
SCHEMA = 1
_SOURCES = ("config", "checkpoint")
_TRANSFORMERS_VERSION = Version(transformers.__version__)
# `from_config`/`from_pretrained` take `dtype=` from 4.56 on; older releases only `torch_dtype=`.
DTYPE_KWARG_SINCE = Version("4.56.0")
_DTYPE_KWARG = "dtype" if _TRANSFORMERS_VERSION >= DTYPE_KWARG_SINCE else "torch_dtype"
# transformers' auto classes are untyped; keep that to one name.
_AUTO_MODEL: Any = transformers.AutoModelForCausalLM
_AUTO_CONFIG: Any = transformers.AutoConfig


@dataclass(frozen=True)
class ModelSpec:
    """One model file: where the architecture (and, for checkpoints, the weights) come from."""

    name: str
    source: Literal["config", "checkpoint"]
    config: Mapping[str, Any] | None
    checkpoint: str | None
    path: Path | None
    description: str = ""

    @classmethod
    def from_file(cls, path: Path) -> ModelSpec:
        """Read and validate a schema-1 model YAML file; ModelError names the field and the fix."""
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise ModelError(f"{path}: cannot read the model file ({error.strerror}).") from error
        except yaml.YAMLError as error:
            raise ModelError(f"{path}: not valid YAML ({_first_line(error)}); fix it.") from error
        if not isinstance(data, dict):
            raise ModelError(f"{path}: expected a mapping with `schema: {SCHEMA}` at the top.")
        return cls.from_mapping(data, path=path)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: Path | None = None) -> ModelSpec:
        """Validate the parsed contents of a model file (`path` names it in errors)."""
        where = str(path) if path is not None else "model spec"
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ModelError(
                f"{where}: field `schema` is {schema!r}; this phasebench reads schema {SCHEMA} "
                f"model files only: set `schema: {SCHEMA}` and use its fields (name, source, "
                "description, config or checkpoint)."
            )
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ModelError(f"{where}: field `name` is missing; set it to the file's stem.")
        if path is not None and name != path.stem:
            raise ModelError(f"{where}: field `name` is {name!r}; it must equal {path.stem!r}.")
        source = data.get("source")
        if source not in _SOURCES:
            raise ModelError(
                f"{where}: field `source` is {source!r}; use `config` or `checkpoint`."
            )
        description = data.get("description", "")
        if not isinstance(description, str):
            raise ModelError(f"{where}: field `description` must be a string.")
        unknown = set(data) - {"schema", "name", "source", "description", "config", "checkpoint"}
        if unknown:
            raise ModelError(f"{where}: unknown field(s) {sorted(unknown)}; remove them.")
        if source == "config":
            config = data.get("config")
            if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
                raise ModelError(
                    f"{where}: field `config` must be a config.json mapping with `model_type`."
                )
            if "checkpoint" in data:
                raise ModelError(f"{where}: `checkpoint` is only for `source: checkpoint`.")
            return cls(name, "config", dict(config), None, path, description)
        checkpoint = data.get("checkpoint")
        if not isinstance(checkpoint, str) or not checkpoint:
            raise ModelError(
                f"{where}: field `checkpoint` must be a local directory or a cached hub id."
            )
        if "config" in data:
            raise ModelError(f"{where}: `config` is only for `source: config`; remove it.")
        return cls(name, "checkpoint", None, checkpoint, path, description)

    @classmethod
    def from_config_json(cls, path: Path) -> ModelSpec:
        """A spec for a bare Hugging Face `config.json` file (random weights)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ModelError(
                f"{path}: cannot read the config file ({_first_line(error)})."
            ) from error
        if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
            raise ModelError(f"{path}: not a Hugging Face config.json (no `model_type` field).")
        return cls(path.stem, "config", data, None, path, f"config file {path}")

    def hf_config(self) -> Any:
        """A fresh transformers config for this model; offline, nothing downloaded."""
        if self.config is not None:
            return _config_from_mapping(self.config, self._where())
        assert self.checkpoint is not None
        with _offline():
            try:
                return _AUTO_CONFIG.from_pretrained(self.checkpoint, local_files_only=True)
            except (OSError, ValueError) as error:
                raise ModelError(self._missing_checkpoint(error)) from error

    def max_positions(self) -> int | None:
        """Longest sequence the architecture supports (`max_position_embeddings`/`n_positions`)."""
        text = _text_config(self.hf_config())
        for field in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(text, field, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def _where(self) -> str:
        return str(self.path) if self.path is not None else self.name

    def _missing_checkpoint(self, error: Exception) -> str:
        return (
            f"{self._where()}: checkpoint {self.checkpoint!r} is not a local directory or a hub "
            f"id in the local Hugging Face cache ({_first_line(error)}); download it once with "
            "`huggingface-cli download` or point `checkpoint:` at a directory."
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if getter is not None else config


def _config_from_mapping(mapping: Mapping[str, Any], where: str) -> Any:
    fields = dict(mapping)
    model_type = fields.pop("model_type")
    if model_type not in CONFIG_MAPPING:
        raise ModelError(
            f"{where}: config field `model_type` is {model_type!r}, which transformers "
            f"{transformers.__version__} does not know; upgrade transformers or fix the name."
        )
    fields = {key: _yaml_float(value) for key, value in fields.items()}
    try:
        return CONFIG_MAPPING[model_type].from_dict(fields)
    except Exception as error:  # transformers validates with several exception types
        raise ModelError(f"{where}: invalid `config` ({_first_line(error)}); fix it.") from error


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _yaml_float(value: Any) -> Any:
    """`1e-6` as a float: YAML 1.1 (PyYAML) reads exponent floats without a dot as strings."""
    if isinstance(value, str) and _FLOAT_TEXT.match(value):
        return float(value)
    return value


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextmanager
def _offline() -> Iterator[None]:
    """Hugging Face libraries stay offline inside (with `local_files_only=True` at each call,
    which holds even where the hub library read its environment at import time)."""
    saved = {var: os.environ.get(var) for var in _OFFLINE_VARS}
    os.environ.update(dict.fromkeys(_OFFLINE_VARS, "1"))
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def list_models(models_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the model files in `models_dir`, sorted."""
    return sorted(p.stem for p in models_dir.glob("*.yaml"))


def load_model_spec(name_or_path: str, models_dir: Path = MODELS_DIR) -> ModelSpec:
    """A model by name (a file in `models_dir`), by model YAML path, or by config.json path.

    Unknown names raise ModelError with the closest known names.
    """
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return ModelSpec.from_file(candidate)
    if candidate.suffix == ".json":
        if not candidate.is_file():
            raise ModelError(f"{candidate}: no such config file; check the path.")
        return ModelSpec.from_config_json(candidate)
    if candidate.is_dir() and (candidate / "config.json").is_file():
        return ModelSpec.from_config_json(candidate / "config.json")
    path = models_dir / f"{name_or_path}.yaml"
    if path.is_file():
        return ModelSpec.from_file(path)
    known = list_models(models_dir)
    close = difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known models: {', '.join(known)}."
    raise ModelError(
        f"model {name_or_path!r} is not a file in {models_dir} nor a config path; {hint}"
    )


def build_model(
    spec: ModelSpec,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    attention: str | None = None,
) -> Any:
    """The model of `spec` on `device` in `dtype`, in eval mode.

    `source: config` gets fast random weights (`randinit`); `device` may be `meta` for shape-only
    work (no values at all). `source: checkpoint` loads the weights offline. `attention` is the
    `attn_implementation` (None: transformers' default).
    """
    device = torch.device(device)
    kwargs: dict[str, Any] = {_DTYPE_KWARG: dtype}
    if attention is not None:
        kwargs["attn_implementation"] = attention
    if spec.source == "checkpoint":
        return _load_checkpoint(spec, device, kwargs)
    config = spec.hf_config()
    if device.type == "meta":
        with torch.device("meta"):
            model = _AUTO_MODEL.from_config(config, **kwargs)
        return model.eval()
    with matrices_on_meta():
        model = _AUTO_MODEL.from_config(config, **kwargs)
    fill_random_(model, device, seed)
    return model.eval()


def build_meta_model(spec: ModelSpec, dtype: torch.dtype) -> Any:
    """The architecture on the meta device (shapes only); a checkpoint from its config alone."""
    if spec.source == "checkpoint":  # build_model would load the weights; the config suffices
        mapping = spec.hf_config().to_dict()
        spec = dataclasses.replace(spec, source="config", config=mapping, checkpoint=None)
    return build_model(spec, torch.device("meta"), dtype)


def build_model_reference(spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> Any:
    """The same architecture built the slow standard way (`from_config`), for comparisons."""
    model = _AUTO_MODEL.from_config(spec.hf_config(), **{_DTYPE_KWARG: dtype})
    return model.to(device).eval()


def _load_checkpoint(spec: ModelSpec, device: torch.device, kwargs: dict[str, Any]) -> Any:
    with _offline():
        try:
            model = _AUTO_MODEL.from_pretrained(spec.checkpoint, local_files_only=True, **kwargs)
        except (OSError, ValueError) as error:
            raise ModelError(spec._missing_checkpoint(error)) from error
    return model.to(device).eval()


def parameter_count(model: torch.nn.Module) -> int:
    """Number of parameters, tied ones counted once."""
    return sum(p.numel() for p in model.parameters())
