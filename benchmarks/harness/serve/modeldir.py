"""The model folder a server loads, and the prompts of exactly P tokens sent to it.

A `source: config` model has no checkpoint and no tokenizer, so `serving_model_dir` writes both
once (`model.saved.save_once`, cached like the tensor-parallel models) under
`$PHASEBENCH_SERVE_MODEL_CACHE`, else `$XDG_CACHE_HOME/phasebench/serve-models`, else
`~/.cache/phasebench/serve-models`:

* the random weights (`model.models.build_model`, the cell's dtype and seed) with
  `eos_token_id`, `bos_token_id` and `pad_token_id` unset in the config and the generation
  config (greedy): nothing can end a generation early, so a request for N tokens gets exactly N
  (`transformers serve` refuses `ignore_eos` and `min_tokens` with HTTP 422);
* a word-level tokenizer over the model's whole vocabulary (`w0` ... `w<V-1>`, split on
  whitespace, no special tokens, so every id decodes to a word and streams as one event), and a
  chat template that concatenates the messages' contents: a prompt of P words is P tokens on
  both `/v1/completions` and `/v1/chat/completions`.

A `source: checkpoint` model's own folder is served as it is (its tokenizer, its EOS: a short
response then shows as an error row). `prompt_text` makes the seeded P-word prompts.
It deliberately starts no server (`launcher`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import torch
import transformers

from benchmarks.harness.device.devices import dtype_name
from benchmarks.harness.errors import ServeError
from benchmarks.harness.model.models import ModelSpec, build_model
from benchmarks.harness.model.saved import SavedFolder, save_once

CACHE_ENV = "PHASEBENCH_SERVE_MODEL_CACHE"
MARKER = "phasebench-serve.json"
TOKENIZER = "wordlevel-1"  # bump when the tokenizer written here changes
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def model_cache_root() -> Path:
    """Where serving model folders live (module docstring)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasebench" / "serve-models"


def vocab_size(spec: ModelSpec) -> int:
    """The model's vocabulary size (its text config's)."""
    return int(spec.hf_config().get_text_config().vocab_size)


def folder_key(spec: ModelSpec, dtype: torch.dtype, seed: int) -> str:
    """The cache folder's name: model, dtype, seed, and a digest of what shapes its contents."""
    text = json.dumps(
        {
            "config": spec.config,
            "transformers": transformers.__version__,
            "seed": seed,
            "tokenizer": TOKENIZER,
        },
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"{spec.name}-{dtype_name(dtype)}-seed{seed}-{digest}"


def _no_eos(target: Any) -> None:
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if hasattr(target, name):
            setattr(target, name, None)


def write_tokenizer(folder: Path, size: int) -> None:
    """The word-level tokenizer and chat template (module docstring) into `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 - with transformers

    vocab = {f"w{i}": i for i in range(size)}
    # The unknown word maps to an ordinary word: there is no special token to skip in decoding.
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # transformers' classes are untyped.
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)  # type: ignore[no-untyped-call]
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)


def serving_model_dir(
    spec: ModelSpec, dtype: torch.dtype, *, seed: int = 0, root: Path | None = None
) -> SavedFolder:
    """The folder a server loads for `spec` (module docstring): written once, then reused."""
    if spec.source == "checkpoint":
        folder = Path(spec.checkpoint or "")
        if not folder.is_dir():
            raise ServeError(
                f"{spec.name}: a server loads a local checkpoint folder; {spec.checkpoint!r} is "
                "not one (download it once and point `checkpoint:` at it)"
            )
        return SavedFolder(folder, True, 0.0)

    def write(tmp: Path) -> dict[str, Any]:
        model = build_model(spec, torch.device("cpu"), dtype, seed)
        _no_eos(model.config)
        _no_eos(model.config.get_text_config())
        greedy = transformers.GenerationConfig(do_sample=False)  # type: ignore[no-untyped-call]
        model.generation_config = greedy
        _no_eos(model.generation_config)
        model.save_pretrained(tmp)
        del model
        write_tokenizer(tmp, vocab_size(spec))
        return {"name": spec.name, "dtype": dtype_name(dtype), "seed": seed, "tokenizer": TOKENIZER}

    root = model_cache_root() if root is None else root
    return save_once(root, folder_key(spec, dtype, seed), write, marker=MARKER)


def prompt_text(prompt_len: int, vocab: int, *, seed: int, index: int) -> str:
    """Request `index`'s prompt: `prompt_len` seeded words of the word-level vocabulary."""
    if prompt_len < 1 or vocab < 1:
        raise ServeError(f"a prompt needs P >= 1 words of a vocabulary >= 1 (P={prompt_len})")
    rng = random.Random(seed * 1_000_003 + index)
    return " ".join(f"w{rng.randrange(vocab)}" for _ in range(prompt_len))
