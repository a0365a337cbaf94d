"""A host with an accelerator, for a CPU-only torch: on `PYTHONPATH`, every Python process that
starts (torchrun, each rank) reports `PHASEBENCH_FAKE_ACCELERATOR` (`cuda`, `mps`) where
transformers and torch look: `torch._C._get_accelerator()` and
`torch.accelerator.current_accelerator()` (what a CUDA or MPS build answers, compiled in,
whatever is visible). Tests only (tests/harness/tp/test_runs.py)."""

import os

_KIND = os.environ.get("PHASEBENCH_FAKE_ACCELERATOR")
if _KIND:
    import torch

    def _accelerator(check=None):
        del check
        return torch.device(_KIND)

    torch._C._get_accelerator = _accelerator
    torch._C._accelerator_getAccelerator = lambda: torch.device(_KIND)
