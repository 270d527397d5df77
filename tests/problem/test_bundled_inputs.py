"""Bundled problems whose custom inputs decide how much work a call does: every draw has the same work, so a time
read on one draw (upstream reads one, seeded) and the median over several agree."""

from pathlib import Path

import torch

from core.problem import load_problem
from core.problem.inputs import make_inputs

PROBLEMS = Path(__file__).resolve().parents[2] / "problems"


def test_paged_decode_draws_the_same_lengths_in_another_order_and_the_longest_fills_the_table(monkeypatch):
    # The normal values of q and the caches are not what this is about (drawing them took 30 s on a CPU); their
    # bfloat16 buffers are left unwritten.
    monkeypatch.setattr(torch, "randn",
                        lambda *shape, device=None: torch.empty(shape, dtype=torch.bfloat16, device=device))
    problem = load_problem(next((PROBLEMS / "attention").glob("003_gqa_paged_decode_*")))
    reordered = 0
    for workload in problem.workloads:
        axes = {**workload.axes, **workload.resolved_axes}
        max_len = axes["max_pages_per_seq"] * axes["page_size"]
        draws = [make_inputs(problem, workload, "cpu", seed) for seed in (1, 2, 3)]
        lengths = [d["seq_lens"].long() for d in draws]
        for made, seq_lens in zip(draws, lengths):
            assert torch.equal(seq_lens.sort().values, lengths[0].sort().values), workload.index
            assert seq_lens.max() == max_len and seq_lens.min() >= max(1, max_len // axes["batch_size"])
            pages = made["block_table"].long()
            used = torch.arange(pages.shape[1])[None, :] < ((seq_lens + axes["page_size"] - 1)
                                                            // axes["page_size"])[:, None]
            assert pages[used].unique().numel() == int(used.sum())  # distinct pages for the tokens read
        if axes["batch_size"] > 1:
            assert len(lengths[0].unique()) == axes["batch_size"], "lengths differ between sequences"
            reordered += any(not torch.equal(lengths[0], other) for other in lengths[1:])
    assert reordered == sum(w.axes["batch_size"] > 1 for w in problem.workloads)
