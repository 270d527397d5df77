"""The spot check of timed calls (core.evaluate.spot): the judge compares a sample of each input buffer's last timed
outputs, drawn from a seed the pool sends only after the timing. On outputs larger than the sample, a candidate
honest in the checked rounds but lazy in the timed calls is still caught, and an honest one passes."""

import json

import pytest
import torch
from evaluate_support import HONEST_DPS, python_solution

from core.evaluate import Status
from core.evaluate.spot import SPOT_SAMPLES, sample_indices, sampled
from core.problem import load_problem


def test_small_outputs_are_checked_whole_and_large_ones_by_a_seeded_sample():
    assert sample_indices(10, seed=3).tolist() == list(range(10))
    drawn = sample_indices(10**6, seed=7)
    assert len(drawn) == SPOT_SAMPLES and 0 <= int(drawn.min()) and int(drawn.max()) < 10**6
    assert torch.equal(drawn, sample_indices(10**6, seed=7))  # the judge draws what the candidate's process drew
    assert not torch.equal(drawn, sample_indices(10**6, seed=8))
    assert len(set(drawn.tolist())) > 0.9 * SPOT_SAMPLES  # spread over the output, not a few places


def test_a_sample_holds_the_values_at_its_indices_whatever_the_dtype():
    values = torch.randn(512, 300)
    picked = sampled(values, (512, 300), seed=5)
    assert torch.equal(picked, values.reshape(-1)[sample_indices(values.numel(), 5)])
    fp8 = values.to(torch.float8_e4m3fn)  # index_select has no float8 kernel: gathered as bytes
    assert torch.equal(sampled(fp8, (512, 300), seed=5).view(torch.uint8),
                       fp8.reshape(-1).view(torch.uint8)[sample_indices(fp8.numel(), 5)])


def test_a_wrong_shape_or_a_number_is_left_for_the_comparison_to_refuse():
    wrong = torch.zeros(511, 300)
    assert sampled(wrong, (512, 300), seed=1) is wrong
    assert sampled(3.0, (), seed=1) == 3.0


LAZY_WHEN_TIMED = '''import torch

_calls = [0]

def run(x, weight, eps, out):
    _calls[0] += 1
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    if _calls[0] <= 5:  # the checked rounds: every row
        out.copy_(y)
    else:  # the timed calls: half the rows, the rest left as the harness filled them
        half = out.shape[0] // 2
        out[:half].copy_(y[:half])
'''


@pytest.fixture(scope="module")
def large_rmsnorm(rmsnorm_problem, tmp_path_factory):
    """The tests' RMSNorm with one workload of 512 x 256 outputs: twice the sample."""
    folder = tmp_path_factory.mktemp("problems") / "norm" / "rmsnorm_eval"
    folder.mkdir(parents=True)
    definition = json.loads((rmsnorm_problem.path / "definition.json").read_text())
    (folder / "definition.json").write_text(json.dumps(definition))
    workload = json.loads((rmsnorm_problem.path / "workload.jsonl").read_text().splitlines()[0])
    workload.update(uuid="large", axes={"tokens": 512})
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    problem = load_problem(folder)
    assert 512 * 256 > SPOT_SAMPLES
    return problem


def test_a_candidate_lazy_only_in_its_timed_calls_is_caught_by_the_sample(cpu_pool, large_rmsnorm):
    verdict = cpu_pool.evaluate(large_rmsnorm, python_solution(LAZY_WHEN_TIMED), rounds=5)
    assert verdict.status is Status.REWARD_HACK and "timed call" in verdict.reason, verdict


def test_an_honest_candidate_passes_the_sampled_spot_check(cpu_pool, large_rmsnorm):
    verdict = cpu_pool.evaluate(large_rmsnorm, python_solution(HONEST_DPS), rounds=5)
    assert verdict.status is Status.PASSED, verdict.reason
    assert verdict.workloads[0].timing is not None
    assert "spot" in verdict.workloads[0].phase_s  # the sample was asked for after the timing
