"""The self-check's model probes: the engine's tokens against `generate` on the device, and
FlashAttention-2 against sdpa where flash-attn is installed (issue 30, row 6).

* **Greedy tokens** (`greedy_tokens`, every device): the engine's greedy tokens (the dynamic
  cache, and the static cache as `configure_engine` sets it up) equal `model.generate
  (do_sample=False)`'s for the same prompt (`overhead.hf_generate`: exactly N tokens). float32,
  so a near-tie of two logits cannot flip a token between two correct kernels.
* **FlashAttention-2** (`flash_attn_logits`, CUDA with flash-attn): the suite skips FA2
  with a static cache (`decide.attention_cache_reason`), so FA2 is measured with the dynamic
  cache; the probe compares its prompt logits with sdpa's (max abs difference) and the
  engine's FA2 tokens with `generate`'s. Half precision, as FA2 requires.
"""

from __future__ import annotations

import torch

from benchmarks.harness.doctor.findings import Finding, JsonValue, ok, skip
from benchmarks.harness.engine import Engine, make_prompt
from benchmarks.harness.matrix.cells import Cell
from benchmarks.harness.model.models import build_model, load_model_spec
from benchmarks.harness.overhead import hf_generate
from benchmarks.harness.runmode.decide import (
    attention_cache_reason,
    attention_reason,
    cache_reason,
    causal_lm_class,
    configure_engine,
)

BATCH = 2
PROMPT_LEN = 16
NEW_TOKENS = 8
FA2_DTYPE = torch.bfloat16
FA2_LOGITS_TOLERANCE = 0.05
"""Largest |FA2 - sdpa| logit difference allowed, as a share of the largest |logit|: bf16 keeps
~3 significant digits, and the two kernels sum in different orders."""


def engine_tokens(engine: Engine, prompt: torch.Tensor) -> torch.Tensor:
    """The engine's N greedy tokens `[B, N]` on the host."""
    return engine.generate(prompt, NEW_TOKENS).generated_ids


def reference_tokens(model: object, prompt: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`generate`'s N greedy tokens `[B, N]` on the host."""
    out = hf_generate(model, prompt.to(device), NEW_TOKENS)
    return out[:, prompt.shape[-1] :].to("cpu")


def judge_tokens(what: str, ours: torch.Tensor, theirs: torch.Tensor) -> tuple[bool, str]:
    """(equal, a short account): how many of the tokens differ, and where the first does."""
    if ours.shape != theirs.shape:
        return False, f"{what}: shapes differ ({tuple(ours.shape)} vs {tuple(theirs.shape)})"
    differ = (ours != theirs).nonzero()
    if differ.numel() == 0:
        return True, f"{what}: {ours.numel()} token(s) equal"
    row, col = (int(v) for v in differ[0])
    return False, (
        f"{what}: {differ.shape[0]} of {ours.numel()} token(s) differ, first at sequence {row} "
        f"token {col + 1}"
    )


def static_cell(model_name: str, device: torch.device) -> Cell:
    """The probe's prompt as a float32 `cache: static` cell (P + N - 1 positions)."""
    return Cell(
        model_name, str(device), "float32", BATCH, PROMPT_LEN, NEW_TOKENS, 0, 1, 0,
        cache="static",
    )  # fmt: skip


def probe_greedy_tokens(model_name: str, device: torch.device) -> Finding:
    """The engine's tokens (dynamic and static cache) against `generate`'s."""
    check = "selfcheck.greedy_tokens"
    spec = load_model_spec(model_name)
    model = build_model(spec, device, torch.float32, seed=0)
    vocab = int(model.config.get_text_config().vocab_size)
    prompt = make_prompt(BATCH, PROMPT_LEN, vocab, seed=0)
    theirs = reference_tokens(model, prompt, device)
    accounts: list[tuple[bool, str]] = []
    engine = Engine(model, device)
    accounts.append(judge_tokens("dynamic cache", engine_tokens(engine, prompt), theirs))
    config = model.config
    unsupported = cache_reason("static", config, causal_lm_class(config))
    if unsupported is None:  # the static cache as a `cache: static` cell gets it
        configure_engine(engine, static_cell(model_name, device))
        accounts.append(judge_tokens("static cache", engine_tokens(engine, prompt), theirs))
    else:
        accounts.append((True, f"static cache not checked ({unsupported})"))
    text = f"{model_name} float32 on {device}, B={BATCH} P={PROMPT_LEN} N={NEW_TOKENS}: " + (
        "; ".join(account for _, account in accounts)
    )
    data: dict[str, JsonValue] = {"tokens_equal": all(equal for equal, _ in accounts)}
    if not data["tokens_equal"]:
        return Finding(
            check,
            "bad",
            f"{text} against generate(do_sample=False): the engine does not decode what "
            "`generate` does on this device",
            "report this line with the device and transformers version",
            data,
        )
    return ok(check, f"{text}, as generate(do_sample=False)", **data)


def fa2_skip_reason(model_name: str, device: torch.device) -> str | None:
    """Why FA2 cannot run here (flash-attn missing, not CUDA, the model lacks it), or None."""
    config = load_model_spec(model_name).hf_config()
    dtype = str(FA2_DTYPE).removeprefix("torch.")
    return attention_reason("flash_attention_2", device.type, dtype, causal_lm_class(config))


def probe_fa2(model_name: str, device: torch.device) -> Finding:
    """FA2 (dynamic cache) prompt logits against sdpa's, and its tokens against `generate`'s."""
    check = "selfcheck.flash_attn_logits"
    reason = fa2_skip_reason(model_name, device)
    if reason is not None:
        return skip(check, reason)
    spec = load_model_spec(model_name)
    fa2 = build_model(spec, device, FA2_DTYPE, seed=0, attention="flash_attention_2")
    sdpa = build_model(spec, device, FA2_DTYPE, seed=0, attention="sdpa")
    vocab = int(fa2.config.get_text_config().vocab_size)
    prompt = make_prompt(BATCH, PROMPT_LEN, vocab, seed=0).to(device)
    with torch.inference_mode():
        fa2_out = fa2(input_ids=prompt).logits.float()
        sdpa_logits = sdpa(input_ids=prompt).logits.float()
    diff = float((fa2_out - sdpa_logits).abs().max())
    scale = float(sdpa_logits.abs().max())
    equal, account = judge_tokens(
        "FA2 engine vs FA2 generate",
        engine_tokens(Engine(fa2, device), prompt.to("cpu")),
        reference_tokens(fa2, prompt.to("cpu"), device),
    )
    static = attention_cache_reason("flash_attention_2", "static")
    data: dict[str, JsonValue] = {
        "fa2_max_abs_logit_diff": diff,
        "fa2_max_abs_logit": scale,
        "fa2_tokens_equal": equal,
    }
    text = (
        f"{model_name} bf16 on {device}, dynamic cache: FA2 vs sdpa prompt logits differ by at "
        f"most {diff:.3g} (largest |logit| {scale:.3g}); {account}; FA2 with a static cache is "
        f"{'skipped by the suite' if static else 'NOT skipped by the suite'}"
    )
    if diff > FA2_LOGITS_TOLERANCE * max(scale, 1e-6) or not equal or static is None:
        return Finding(
            check,
            "bad",
            f"{text}: FA2 cells would measure other attention than sdpa's or generate's",
            "report this line with the flash-attn and transformers versions; drop "
            "flash_attention_2 from the matrix until it is fixed",
            data,
        )
    return ok(check, text, **data)
