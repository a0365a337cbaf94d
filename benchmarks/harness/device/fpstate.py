"""The CPU floating-point state each cell runs in: flush-to-zero (FTZ), denormals-are-zero (DAZ).

Subnormal floats make x86 and some Arm cores take a microcode path tens of times slower per
operation, so whether FTZ/DAZ are on can change a float32 timing by up to 2x where subnormals
occur. The state is per thread and process-wide in effect, and code other than ours may change
it: a shared library built with `-ffast-math` (gcc links `crtfastmath.o`) turns both on when it is
loaded, which is how a torch.compile cell could leave them on for every cell after it.

* `read_fp_state()` observes the calling thread's state with two float32 operations (no MXCSR
  access: it works on any CPU torch runs on): FTZ when a subnormal *result* becomes 0, DAZ when a
  subnormal *input* reads as 0.
* `pin_fp_state()` sets both to `FLUSH_DENORMAL` (off) with `torch.set_flush_denormal` and says
  what it set. Off is what a user's process has: Python, torch and transformers leave both off
  at start, and `generate` in a script or a server runs so (checked: torch 2.13, transformers
  5.24). The suite pins before each cell's warmup, again before its timed rounds, and after the
  cell, so a cell that changed the state cannot leak it into the next one.

It pins the calling thread; torch's intra-op worker threads take the state of the thread that
created them (at their first parallel region, after the first pin). It does not decide whether
subnormals occur in a model (`model/randinit.py` makes sure ours produce none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FLUSH_DENORMAL = False
"""The pinned state: FTZ and DAZ off, as in a fresh Python process with torch imported."""


@dataclass(frozen=True)
class FpState:
    """The calling thread's treatment of subnormal float32 values."""

    flush_to_zero: bool  # a subnormal result is written as 0
    denormals_are_zero: bool  # a subnormal input is read as 0

    @property
    def flush_denormal(self) -> bool:
        """Both on: what `torch.set_flush_denormal(True)` sets."""
        return self.flush_to_zero and self.denormals_are_zero

    def as_extra_info(self) -> dict[str, bool]:
        """The `extra_info` fields (plain JSON)."""
        return {
            "flush_denormal": self.flush_denormal,
            "fp_flush_to_zero": self.flush_to_zero,
            "fp_denormals_are_zero": self.denormals_are_zero,
        }


def read_fp_state() -> FpState:
    """The calling thread's FTZ/DAZ state, observed (not read from a register)."""
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal float32
    # Halving the smallest normal gives a subnormal result, or 0 under FTZ.
    flush_to_zero = float((torch.full((1,), tiny, dtype=torch.float32) * 0.5).item()) == 0.0
    # The bits 0x00000001 are the smallest subnormal (2^-149), made without arithmetic so FTZ
    # cannot touch it; times 2^30 it is a normal number, or 0 when DAZ reads the input as 0.
    smallest = torch.ones(1, dtype=torch.int32).view(torch.float32)
    denormals_are_zero = float((smallest * 2.0**30).item()) == 0.0
    return FpState(flush_to_zero=flush_to_zero, denormals_are_zero=denormals_are_zero)


def pin_fp_state(flush_denormal: bool = FLUSH_DENORMAL) -> FpState:
    """Set FTZ and DAZ both to `flush_denormal` on this thread; return the state observed after.

    On a CPU where torch cannot set them (`set_flush_denormal` returns False) the observed state
    is returned unchanged, so the record still says what the cell ran with.
    """
    torch.set_flush_denormal(flush_denormal)
    return read_fp_state()
