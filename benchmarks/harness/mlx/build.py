"""Build an MLX cell's model: mlx-lm's model class for the same config, in the cell's dtype.

* `source: config` (and a bare config.json): the config transformers reads, as the dict it
  writes (`to_dict()`, what a checkpoint's config.json holds), goes to mlx-lm's own model
  lookup (`mlx_lm.utils._get_classes`: `mistral` runs as `llama`), with random weights: mlx's
  layer initialisers under `mx.random.seed(cell seed)`, then cast to the dtype (floating
  parameters only) and evaluated, untimed. A tied config gets `sanitize` as mlx-lm's loader
  calls it for a tied checkpoint (no `lm_head.weight`). The weights differ from torch's random
  ones; the shapes, and so the work and the bytes, are the same (checked: `weights.py`).
* `source: checkpoint`: a local directory (or a hub id already in the Hugging Face cache,
  resolved offline) through mlx-lm's loader (`mlx_lm.utils.load_model`), cast to the dtype.
* `quant` `mlx4` / `mlx8`: mlx-lm's `quantize_model` (affine, group 64), as `mlx_lm.convert -q`
  does: embeddings and the LM head included.

It deliberately does not time anything but the build, or download anything.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import ModelError
from benchmarks.harness.mlx.runtime import mx_dtype, mx_module
from benchmarks.harness.mlx.weights import GROUP_SIZE, QUANT_BITS, predicted_bytes, stored_bytes
from benchmarks.harness.model.models import ModelSpec


@dataclass(frozen=True, eq=False)
class BuiltMlx:
    """An MLX model ready to run, and its weight figures."""

    model: Any  # mlx.nn.Module in eval mode, parameters evaluated
    config: dict[str, Any]  # what mlx-lm read
    build_s: float
    quantize_s: float
    weights_bytes: int  # stored: the arrays' nbytes
    weights_dense_bytes: int  # the same model unquantized, in the cell's dtype
    weights_predicted_bytes: int  # `weights.predicted_bytes` before quantizing


def mlx_config(spec: ModelSpec) -> dict[str, Any]:
    """The config dict mlx-lm reads for a model file (a checkpoint's own config.json)."""
    if spec.source == "checkpoint":
        from mlx_lm.utils import load_config  # noqa: PLC0415 - optional dependency

        config: dict[str, Any] = load_config(checkpoint_dir(spec))
        return config
    mapping: dict[str, Any] = spec.hf_config().to_dict()
    return mapping


def model_classes(config: dict[str, Any]) -> tuple[Any, Any]:
    """mlx-lm's (Model, ModelArgs) for `config`; ModelError when mlx-lm has no such type."""
    from mlx_lm.utils import _get_classes  # noqa: PLC0415 - mlx-lm's own lookup (load_model's)

    try:
        return _get_classes(config)  # type: ignore[no-any-return]
    except ValueError as error:
        raise ModelError(
            f"mlx-lm cannot run model_type {config.get('model_type')!r}: {error}"
        ) from error


def checkpoint_dir(spec: ModelSpec) -> Path:
    """A checkpoint's local directory: the path itself, or the hub id's snapshot in the local
    Hugging Face cache (offline: nothing is downloaded)."""
    assert spec.checkpoint is not None  # a checkpoint spec has one
    path = Path(spec.checkpoint)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - transformers' dependency

    try:
        return Path(snapshot_download(spec.checkpoint, local_files_only=True))
    except Exception as error:  # the hub library raises several kinds for "not cached"
        raise ModelError(
            f"{spec.name}: checkpoint {spec.checkpoint!r} is not a directory nor in the local "
            "Hugging Face cache; download it once or point `checkpoint:` at a directory"
        ) from error


def build(spec: ModelSpec, *, dtype: str, seed: int, quant: str, device: Any) -> BuiltMlx:
    """The model of `spec` on MLX `device` in `dtype`, quantized per `quant` (`mlx4`/`mlx8`)."""
    mx = mx_module()
    started_s = time.perf_counter()
    config = mlx_config(spec)
    with mx.stream(device):
        if spec.source == "checkpoint":
            from mlx_lm.utils import load_model  # noqa: PLC0415 - optional dependency

            model, config = load_model(checkpoint_dir(spec), lazy=True)  # a local directory
        else:
            model_class, args_class = model_classes(config)
            mx.random.seed(seed)
            model = model_class(args_class.from_dict(config))
            if config.get("tie_word_embeddings") and hasattr(model, "sanitize"):
                # A tied checkpoint has no `lm_head.weight`, and mlx-lm's loader hands `sanitize`
                # weights without it: where some model files tie their head (gemma3_text).
                model.sanitize({})
        model.set_dtype(mx_dtype(dtype))
        model.eval()
        dense_bytes = stored_bytes(model)  # shapes x dtype: nothing is evaluated for this
        bits = QUANT_BITS.get(quant)
        element = mx_dtype(dtype).size
        predicted = predicted_bytes(model, element_bytes=element, bits=bits, group_size=GROUP_SIZE)
        mx.eval(model.parameters())
        quant_started_s = time.perf_counter()
        if bits is not None:
            from mlx_lm.utils import quantize_model  # noqa: PLC0415 - optional dependency

            with contextlib.redirect_stdout(io.StringIO()):  # its "[INFO] ... bits per weight"
                model, config = quantize_model(model, config, GROUP_SIZE, bits)
            mx.eval(model.parameters())
    done_s = time.perf_counter()
    return BuiltMlx(
        model=model,
        config=config,
        build_s=done_s - started_s,
        quantize_s=done_s - quant_started_s if bits is not None else 0.0,
        weights_bytes=stored_bytes(model),
        weights_dense_bytes=dense_bytes,
        weights_predicted_bytes=predicted,
    )
