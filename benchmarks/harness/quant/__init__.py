"""Quantized weights: applying a method, the bytes really stored, their prediction, accuracy.

Owns `methods` (the `quant` axis: torchao and bitsandbytes, what each needs, applying it in
place), `stored` (stored weight bytes seen through every tensor subclass and quant state),
`predict` (the analytic bytes per Linear from the config, the method and the device's layout),
`accuracy` (a quantized cell against the same model unquantized, untimed: logits, KL, bounds),
`sqnr` (SQNR per quantized Linear on its own inputs and per K/V layer as read back) and
`weights_cli` (the `kv` CLI's weights). The KV-cache side of quantization is `kvquant`.

May import: benchmarks.harness.errors, benchmarks.harness.model, torch, transformers, torchao,
bitsandbytes.
"""
