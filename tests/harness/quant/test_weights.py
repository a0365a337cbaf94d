"""Stored weight bytes through every quantized tensor type, against the analytic prediction.

Every method that runs on CPU x two dtypes, on a tiny Llama whose shapes exercise the rules: the
MLP's width 104 is not a multiple of 16 (CPU int4 leaves gate/up dense) nor of 32, 64 or 128
(torchao leaves down_proj dense for every int4 group); the attention projections (K = 128) are
quantized by every method. The prediction names each Linear left dense and why. These run under
both transformers versions `nox -s tests` installs.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmarks.harness.model.models import ModelSpec, build_meta_model, build_model
from benchmarks.harness.quant.methods import apply_quant, quant_skip_reason, quant_timing_reason
from benchmarks.harness.quant.names import CUDA_ONLY, METHODS
from benchmarks.harness.quant.predict import predict_weights, quantized_weight_bytes
from benchmarks.harness.quant.stored import stored_weights
from benchmarks.harness.roofline.traffic import weights_read_bytes

# Every method but the CUDA-only ones (fp8dq: sm89+; gemlite: Triton) runs on CPU.
CPU_METHODS = tuple(m for m in METHODS if m != "none" and m not in CUDA_ONLY)
LIBRARY = {"nf4": "bitsandbytes", "bnb8": "bitsandbytes"}


def _spec(*, tied: bool = False, intermediate: int = 104) -> ModelSpec:
    return ModelSpec.from_mapping(
        {
            "schema": 1,
            "name": "quant-llama",
            "source": "config",
            "config": {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 128,
                "intermediate_size": intermediate,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 96,
                "max_position_embeddings": 64,
                "tie_word_embeddings": tied,
            },
        }
    )


def _needs(method: str) -> None:
    pytest.importorskip(LIBRARY.get(method, "torchao"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("method", CPU_METHODS)
def test_stored_bytes_equal_the_prediction(method, dtype):
    _needs(method)
    spec = _spec()
    model = apply_quant(build_model(spec, torch.device("cpu"), dtype), method, torch.device("cpu"))
    prediction = predict_weights(
        build_meta_model(spec, dtype), method, dtype=dtype, device_type="cpu"
    )
    # Counted as the suite times it: in eval mode, after a forward (a bitsandbytes 4-bit layer
    # repacks its weight at its first eval forward on an AVX-512 BF16 CPU).
    with torch.inference_mode():
        model.eval()(input_ids=torch.tensor([[1, 2, 3]]))
    stored = stored_weights(model, dtype)
    assert stored.stored_bytes == prediction.total_bytes
    dense = sum(
        p.numel() * p.element_size()
        for p in build_model(spec, torch.device("cpu"), dtype).parameters()
    )
    assert stored.dense_bytes == prediction.dense_bytes == dense
    assert stored.stored_bytes < dense  # the counter sees through the subclass, not the dense size
    # The model still runs.
    with torch.inference_mode():
        assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 96)


def test_layers_left_dense_are_named_with_the_reason():
    prediction = predict_weights(
        build_meta_model(_spec(), torch.float32),
        "int4wo-g64",
        dtype=torch.float32,
        device_type="cpu",
    )
    reasons = {layer.name.split(".")[-1]: layer.reason for layer in prediction.left_dense}
    assert "N=104 is not a multiple of 16" in reasons["gate_proj"]
    assert "K=104 is not a multiple of the group size 64" in reasons["down_proj"]
    assert "LM head" in reasons["lm_head"]
    assert "q_proj" not in reasons  # K = 64: quantized


@pytest.mark.parametrize(("n", "k", "group"), [(90, 256, 128), (96, 1024, 64), (4100, 3008, 32)])
def test_the_cuda_int4_prediction_is_torchaos_own_layout(monkeypatch, n, k, group):
    """The CUDA tinygemm layout, built by torchao's own `from_hp` on the meta device (shapes
    only: no GPU needed; its capability check is told sm80): the prediction must equal what it
    stores, padding of N to 8 and K to 1024 included."""
    pytest.importorskip("torchao")
    from torchao.quantization.quantize_.workflows.int4 import (  # noqa: PLC0415
        int4_tile_packed_to_4d_tensor as tile,
    )

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (8, 0))
    weight = torch.empty(n, k, device="meta", dtype=torch.bfloat16)
    packed = tile.Int4TilePackedTo4dTensor.from_hp(weight, [1, group])
    linear = nn.Linear(k, n, bias=False, device="meta", dtype=torch.bfloat16)
    linear.weight = nn.Parameter(packed, requires_grad=False)
    stored = stored_weights(nn.Sequential(linear)).stored_bytes
    predicted, reason = quantized_weight_bytes(
        f"int4wo-g{group}", n, k, element_bytes=2, device_type="cuda"
    )
    assert (predicted, reason) == (stored, "")


@pytest.mark.parametrize("method", ["nf4", "bnb8"])
def test_bitsandbytes_layers_run_in_the_models_mode(method):
    """A replaced Linear takes the model's eval mode (bitsandbytes' training path is 2.6x
    slower at decode), and its weight is already in the layout the kernel uses."""
    _needs(method)
    model = apply_quant(
        build_model(_spec(intermediate=128), torch.device("cpu"), torch.float32),
        method,
        torch.device("cpu"),
    )
    assert not [name for name, m in model.named_modules() if m.training]
    before = stored_weights(model).stored_bytes
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2, 3]]))
    assert stored_weights(model).stored_bytes == before  # no repack left for the first round


def test_cpu_int4_outside_bfloat16_is_not_timed():
    pytest.importorskip("torchao")
    for dtype in (torch.float32, torch.float16):
        reason = quant_timing_reason("int4wo-g64", "cpu", dtype)
        assert reason is not None
        assert "bfloat16 activations only" in reason
    assert quant_timing_reason("int4wo-g64", "cpu", torch.bfloat16) is None
    assert quant_timing_reason("int8wo", "cpu", torch.float32) is None
    # The byte check (the `kv` CLI) still runs it: it can run, it is only not timed.
    assert quant_skip_reason("int4wo-g64", "cpu", torch.float32) is None


def test_dense_model_bytes_are_todays_parameter_bytes():
    model = build_model(_spec(tied=True), torch.device("cpu"), torch.bfloat16)
    expected = sum(p.numel() * p.element_size() for p in model.parameters())  # tied once
    assert any(True for _ in model.buffers())  # rotary tables exist and are not weights
    assert stored_weights(model).stored_bytes == expected


@pytest.mark.parametrize("method", ["int8wo", "nf4"])
def test_roofline_reads_stored_bytes(method):
    _needs(method)
    model = apply_quant(
        build_model(_spec(), torch.device("cpu"), torch.float32), method, torch.device("cpu")
    )
    stored = stored_weights(model).stored_bytes
    embedding = model.get_input_embeddings().weight
    rows_unread = (embedding.shape[0] - 1) * embedding.shape[1] * embedding.element_size()
    assert weights_read_bytes(model, batch=1) == stored - rows_unread


def test_torchao_leaves_inductor_config_as_found():
    pytest.importorskip("torchao")
    from torch._inductor import config as inductor_config  # noqa: PLC0415

    before = inductor_config.save_config_portable()
    for method in ("int8wo", "int8dq", "int4wo-g32", "fp8wo"):
        apply_quant(
            build_model(_spec(), torch.device("cpu"), torch.float32), method, torch.device("cpu")
        )
    assert inductor_config.save_config_portable() == before


def test_hqq_and_quanto_modules_are_counted_through():
    hqq = pytest.importorskip("hqq.core.quantize")
    linear = nn.Linear(256, 96, bias=True).to(torch.bfloat16)
    layer = hqq.HQQLinear(
        linear, quant_config=hqq.BaseQuantizeConfig(nbits=4, group_size=64),
        compute_dtype=torch.bfloat16, device="cpu",
    )  # fmt: skip
    # 4-bit data, bf16 scale and zero per group of 64, the bias.
    assert stored_weights(nn.Sequential(layer)).stored_bytes == 96 * 128 + 2 * (96 * 4) * 2 + 96 * 2
    quanto = pytest.importorskip("optimum.quanto")
    model = nn.Sequential(nn.Linear(256, 96, bias=True)).to(torch.bfloat16)
    quanto.quantize(model, weights=quanto.qint8)
    quanto.freeze(model)
    # int8 data, a bf16 scale per row, the bias, and the layer's two scalar activation scales.
    assert stored_weights(model).stored_bytes == 96 * 256 + 96 * 2 + 96 * 2 + 2 * 2


def test_skip_reasons():
    assert "float8 dynamic activation needs a CUDA GPU" in quant_skip_reason(
        "fp8dq", "cpu", torch.float32
    )
    assert quant_skip_reason("none", "mps", torch.float16) is None
    assert "not verified" in (
        quant_skip_reason("int8wo", "mps", torch.float16) or "torchao is not installed"
    )


def test_cuda_only_methods_say_why_on_a_cpu_and_predict_their_layout():
    for name in ("gemlite4-g64", "gemlite8"):
        reason = quant_skip_reason(name, "cpu", torch.bfloat16)
        assert reason is not None
        assert "CUDA" in reason or "gemlite is not installed" in reason
    # Read from torchao 0.18's UIntxBitPackedTensor and gemlite 0.6 (asserted on the first GPU
    # run like every cell): 4 bits plus a scale and a zero per group of 64, in the model dtype.
    assert quantized_weight_bytes("gemlite4-g64", 96, 256, element_bytes=2, device_type="cuda") == (
        96 * 128 + 2 * 4 * 96 * 2,
        "",
    )
    assert quantized_weight_bytes("gemlite8", 96, 256, element_bytes=2, device_type="cuda") == (
        96 * 256 + 96 * 2,
        "",
    )
    dense, reason = quantized_weight_bytes(
        "gemlite4-g64", 96, 200, element_bytes=2, device_type="cuda"
    )
    assert dense is None
    assert "K=200 is not a multiple of the group size 64" in reason


def test_on_a_cuda_box_each_gpu_method_says_what_it_needs(monkeypatch):
    """The reasons the first CUDA box will read, decided from the compute capability (sm80: an
    A100; sm89: an L4 or RTX 4090; sm90: an H100), with no GPU here: only the capability query
    is answered for it."""
    pytest.importorskip("torchao")

    def on(capability):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: capability)

    on((8, 0))
    assert "8.9+" in (quant_skip_reason("fp8dq", "cuda", torch.bfloat16) or "")
    assert quant_skip_reason("int4wo-g64", "cuda", torch.bfloat16) is None  # tinygemm, sm80+
    assert "bfloat16 only" in (quant_skip_reason("int4wo-g64", "cuda", torch.float16) or "")
    assert quant_skip_reason("fp8wo", "cuda", torch.bfloat16) is None
    on((8, 9))
    assert quant_skip_reason("fp8dq", "cuda", torch.bfloat16) is None
    on((7, 5))
    assert "8.0+" in (quant_skip_reason("int4wo-g128", "cuda", torch.bfloat16) or "")
    # CPU int4 outside bfloat16 is refused on the CPU only: CUDA decides by its own rule above.
    assert quant_timing_reason("int8wo", "cuda", torch.float16) is None


def test_missing_package_names_the_install_command(monkeypatch):
    import importlib.util  # noqa: PLC0415

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "bitsandbytes" else real(name, *a),
    )
    reason = quant_skip_reason("nf4", "cpu", torch.float32)
    assert reason is not None
    assert "pip install bitsandbytes==0.50.2" in reason
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gemlite" else real(name, *a),
    )
    reason = quant_skip_reason("gemlite8", "cuda", torch.bfloat16)
    assert reason is not None
    assert "pip install gemlite==0.6.0.post2" in reason
    assert "--group quant-cuda" in reason


def test_the_fit_estimate_reads_predicted_bytes():
    pytest.importorskip("torchao")
    from benchmarks.harness.matrix.cells import Cell  # noqa: PLC0415
    from benchmarks.harness.model.models import MODELS_DIR  # noqa: PLC0415
    from benchmarks.harness.plan import fit_estimate  # noqa: PLC0415

    def cell(**axes):
        return Cell("qwen2.5-0.5b", "cpu", "float32", 1, 512, 32, 1, 1, 0, **axes)

    dense, int4, kv = (
        fit_estimate(c, MODELS_DIR)
        for c in (cell(), cell(quant="int4wo-g64"), cell(kv_quant="hqq4"))
    )
    # 494,032,768 float32 parameters, read on the meta device (each parameter once).
    assert dense.weights_bytes == 494_032_768 * 4
    assert int4.weights_bytes < 0.5 * dense.weights_bytes  # the embedding stays dense
    assert kv.cache_bytes is not None
    assert dense.cache_bytes is not None
    assert kv.cache_bytes < 0.5 * dense.cache_bytes
    # A quantized cache still dequantizes a whole layer each step: the same transient copy.
    assert kv.activation_bytes == dense.activation_bytes
