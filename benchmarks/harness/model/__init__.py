"""Models: architecture files, random-weight and checkpoint builds, transformers compatibility.

Owns `models` (a model YAML or checkpoint -> a built `nn.Module`), `randinit` (the random
weights a built model gets) and `compat` (one spelling of the cache and generation calls for
transformers 4.46-5.x); `saved` (a folder of saved random weights, written once and reused).

May import: benchmarks.harness.errors, torch, transformers, packaging, yaml.
"""
