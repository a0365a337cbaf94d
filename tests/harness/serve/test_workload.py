"""What each request of a pass sends: fixed, ranged, shared-prefix and dataset workloads."""

from __future__ import annotations

import pytest

from benchmarks.harness.errors import ServeError
from benchmarks.harness.matrix.dataset import DatasetRow
from benchmarks.harness.serve.workload import Workload, length_range


def test_a_fixed_workload_sends_p_words_and_asks_n_of_every_request():
    requests = Workload(prompt_len=16, new_tokens=8, vocab=50).requests(5, seed=3)
    assert [len(p.split()) for p in requests.prompts] == [16] * 5
    assert requests.new_tokens == (8,) * 5
    assert len(set(requests.prompts)) == 5  # no two requests share a prompt
    again = Workload(prompt_len=16, new_tokens=8, vocab=50).requests(5, seed=3)
    assert again == requests  # round k of every run sends the same


def test_ranged_lengths_cover_the_range_uniformly_and_stay_inside_it():
    workload = Workload(prompt_len=100, new_tokens=20, vocab=50, range_ratio=0.5)
    assert length_range(100, 0.5) == (50, 150)
    lengths, outputs = [], []
    for seed in range(40):
        requests = workload.requests(25, seed=seed)
        lengths += [len(p.split()) for p in requests.prompts]
        outputs += list(requests.new_tokens)
    assert min(lengths) >= 50
    assert max(lengths) <= 150
    assert min(outputs) >= 10
    assert max(outputs) <= 30
    mean = sum(lengths) / len(lengths)
    assert 95 < mean < 105  # uniform on [50, 150]: mean 100, se ~0.9 over 1000 draws
    assert sum(length < 75 for length in lengths) / len(lengths) == pytest.approx(0.25, abs=0.05)
    assert workload.max_positions == 150 + 30
    assert workload.kind == "ranged"
    assert not workload.uniform_prompts


def test_a_shared_prefix_is_one_text_for_every_request_and_pass():
    workload = Workload(prompt_len=20, new_tokens=4, vocab=1000, prefix_len=12, cell_seed=7)
    first, second = workload.requests(4, seed=1), workload.requests(4, seed=2)
    prefixes = {" ".join(p.split()[:12]) for p in first.prompts + second.prompts}
    assert len(prefixes) == 1
    assert len({" ".join(p.split()[12:]) for p in first.prompts}) == 4
    assert all(len(p.split()) == 20 for p in first.prompts)
    assert workload.uniform_prompts
    assert workload.kind == "prefix"


def test_a_dataset_is_sent_in_order_wrapping_round_by_pass():
    rows = (
        DatasetRow(3, prompt="hello world"),
        DatasetRow(5, prompt_len=7),
        DatasetRow(2, prompt="x"),
    )
    workload = Workload(prompt_len=8, new_tokens=4, vocab=30, dataset=rows)
    first = workload.requests(2, seed=0, pass_index=0)
    second = workload.requests(2, seed=0, pass_index=1)
    assert first.prompts[0] == "hello world"
    assert len(first.prompts[1].split()) == 7
    assert first.new_tokens == (3, 5)
    assert second.prompts[0] == "x"
    assert second.new_tokens == (2, 3)
    assert workload.max_positions == 12
    assert workload.kind == "dataset"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"range_ratio": 1.0}, "range_ratio 1.0 is not a fraction"),
        ({"prefix_len": 8}, "prefix_len 8 must be > 0 and below P = 8"),
        ({"dataset": ()}, "needs at least one row"),
    ],
)
def test_a_bad_workload_is_refused(kwargs, message):
    with pytest.raises(ServeError, match=message):
        Workload(prompt_len=8, new_tokens=4, vocab=10, **kwargs)
