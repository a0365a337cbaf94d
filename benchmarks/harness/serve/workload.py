"""What each request of a load pass sends: its prompt and the output tokens it asks for (pure).

A serving cell's workload (DESIGN §13) is one of:

* **fixed**: every request a prompt of P words and N output tokens (the default);
* **ranged** (`range_ratio` r, vLLM's `--random-range-ratio`): request i's P_i and N_i drawn
  uniformly from the whole numbers in [X(1 - r), X(1 + r)] (at least 1), seeded by the pass's
  seed and i, so round k of every run sends the same lengths;
* **shared prefix** (`prefix_len` L): the first L words are one text for every request of every
  pass of the cell (seeded by the cell's seed alone: a system prompt, what prefix caching
  serves), then P - L words of the request's own;
* **dataset** (`dataset.read_dataset` rows): request i of pass k takes row (k * n + i) mod rows,
  n the requests per pass: the text as written, or a prompt of `prompt_len` words.

Prompts are words `w<id>` of the served word-level vocabulary (`modeldir.prompt_text`), so a
word is a token on the random-weight models phasebench serves; a dataset's own text is sent as it
is, and its length is what the server's usage says. Tokens are never counted here.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from benchmarks.harness.errors import ServeError
from benchmarks.harness.matrix.dataset import DatasetRow
from benchmarks.harness.serve.modeldir import prompt_text


@dataclass(frozen=True)
class PassRequests:
    """One pass's prompts and the N each asks for, in request order."""

    prompts: tuple[str, ...]
    new_tokens: tuple[int, ...]


def length_range(length: int, ratio: float) -> tuple[int, int]:
    """The whole numbers a ranged length is drawn from: [X(1 - r), X(1 + r)], at least 1."""
    return max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio)))


@dataclass(frozen=True)
class Workload:
    """A cell's workload (module docstring)."""

    prompt_len: int
    new_tokens: int
    vocab: int
    range_ratio: float | None = None
    prefix_len: int | None = None
    dataset: tuple[DatasetRow, ...] | None = None
    cell_seed: int = 0

    def __post_init__(self) -> None:
        if self.range_ratio is not None and not 0 <= self.range_ratio < 1:
            raise ServeError(f"range_ratio {self.range_ratio} is not a fraction in [0, 1)")
        if self.prefix_len is not None and not 0 < self.prefix_len < self.prompt_len:
            raise ServeError(
                f"prefix_len {self.prefix_len} must be > 0 and below P = {self.prompt_len}"
            )
        if self.dataset is not None and not self.dataset:
            raise ServeError("a dataset workload needs at least one row")

    @property
    def kind(self) -> str:
        """fixed, ranged, prefix, ranged+prefix or dataset."""
        if self.dataset is not None:
            return "dataset"
        parts = [k for k, v in (("ranged", self.range_ratio), ("prefix", self.prefix_len)) if v]
        return "+".join(parts) or "fixed"

    @property
    def uniform_prompts(self) -> bool:
        """Whether every prompt is P tokens (then the server's prompt count is checked)."""
        return self.dataset is None and not self.range_ratio

    @property
    def max_positions(self) -> int:
        """The most positions (prompt + output tokens) one request may take: what a server's
        cache is sized for. A dataset row given as text counts its words (a bound only where a
        word is a token)."""
        if self.dataset is not None:
            return max(
                (row.prompt_len or len((row.prompt or "").split())) + row.output_len
                for row in self.dataset
            )
        ratio = self.range_ratio or 0.0
        return length_range(self.prompt_len, ratio)[1] + length_range(self.new_tokens, ratio)[1]

    def _prefix(self) -> str:
        assert self.prefix_len is not None
        # index -1: never one of a pass's own prompts (those use 0 ... n - 1)
        return prompt_text(self.prefix_len, self.vocab, seed=self.cell_seed, index=-1)

    def requests(self, count: int, seed: int, pass_index: int = 0) -> PassRequests:
        """The `count` requests of one pass (module docstring)."""
        if count < 1:
            raise ServeError(f"a pass needs at least one request (num_prompts {count})")
        if self.dataset is not None:
            return self._from_dataset(count, seed, pass_index)
        prompts: list[str] = []
        outputs: list[int] = []
        prefix = self._prefix() if self.prefix_len else ""
        for i in range(count):
            p_len, n_len = self.prompt_len, self.new_tokens
            if self.range_ratio:
                rng = random.Random(f"range/{seed}/{i}")
                p_len = rng.randint(*length_range(self.prompt_len, self.range_ratio))
                n_len = rng.randint(*length_range(self.new_tokens, self.range_ratio))
            if prefix:
                own = max(p_len - (self.prefix_len or 0), 1)
                text = prefix + " " + prompt_text(own, self.vocab, seed=seed, index=i)
            else:
                text = prompt_text(p_len, self.vocab, seed=seed, index=i)
            prompts.append(text)
            outputs.append(n_len)
        return PassRequests(tuple(prompts), tuple(outputs))

    def _from_dataset(self, count: int, seed: int, pass_index: int) -> PassRequests:
        assert self.dataset is not None
        prompts: list[str] = []
        outputs: list[int] = []
        for i in range(count):
            row = self.dataset[(pass_index * count + i) % len(self.dataset)]
            if row.prompt is not None:
                prompts.append(row.prompt)
            else:
                prompts.append(prompt_text(row.prompt_len or 1, self.vocab, seed=seed, index=i))
            outputs.append(row.output_len)
        return PassRequests(tuple(prompts), tuple(outputs))
