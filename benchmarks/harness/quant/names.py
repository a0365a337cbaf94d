"""The `quant` axis's values, torch-free: the matrix validates them in milliseconds
(`matrix.axes`), and `methods` says what each one needs and does."""

from __future__ import annotations

METHODS = (
    "none",
    "int8wo",
    "int8dq",
    "int4wo-g32",
    "int4wo-g64",
    "int4wo-g128",
    "fp8wo",
    "fp8dq",
    "nf4",
    "bnb8",
    "gemlite4-g64",
    "gemlite8",
)
# Methods whose kernels exist on CUDA GPUs only (float8 tensor cores, gemlite's Triton kernels).
CUDA_ONLY = ("fp8dq", "gemlite4-g64", "gemlite8")
