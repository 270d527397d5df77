"""The instruments on the H200: real ncu figures on the RMSNorm seed, its SASS and mix, and compute-sanitizer
finding a planted out-of-bounds write at its line, each run confined through the evaluation pool."""

from __future__ import annotations

import anyio
import pytest
from inspect_helpers import planted_solution, planted_source, rmsnorm_problem, seed_solution

from core.build import BuildService
from core.inspect import ncu
from core.inspect.service import Inspector
from core.roofline.counting import analytic_io_bytes
from core.solution.prepare import prepare

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _inspect(method: str, solution, **options):
    from core.evaluate.pool import EvaluationPool

    problem = rmsnorm_problem()

    async def main():
        prepared = await prepare(solution, BuildService())
        assert prepared.ok, prepared.errors
        async with EvaluationPool("cuda", spare=False, readable=[str(problem.path)]) as pool:
            inspector = Inspector(pool.run_confined, device="cuda", timeout_s=240)
            result = await getattr(inspector, method)(problem, prepared, **options)
            return result, pool.usage

    return problem, *anyio.run(main)


def test_profile_of_the_seed_gives_ncu_figures_near_what_its_bytes_imply():
    problem = rmsnorm_problem()
    largest = max((w for w in problem.workloads if w.runnable), key=lambda w: sum(analytic_io_bytes(problem, w)))
    _, result, usage = _inspect("profile", seed_solution(), workload=largest.index)
    assert result.ok and result.instrument == "ncu", result.text
    assert "rmsnorm_bf16" in result.text and "diagnosis: " in result.text
    assert usage.busy_s >= result.device_seconds * 0.9  # the device was held for it
    # The figures, read again from the text's own numbers: DRAM bytes over kernel time match the counters.
    line = next(line for line in result.text.splitlines() if line.strip().startswith("DRAM "))
    rate = float(line.split("(")[1].split(" TB/s")[0])
    duration_us = float(next(line for line in result.text.splitlines() if line.startswith("rmsnorm_bf16"))
                        .split(": ")[1].split(" us")[0])
    implied = sum(analytic_io_bytes(problem, largest)) / (duration_us * 1e-6) / 1e12
    assert 0.5 * implied < rate < 1.5 * implied, (rate, implied, result.text)


def test_assembly_lists_the_seeds_kernel_with_its_mix():
    _, result, _ = _inspect("assembly", seed_solution())
    assert result.ok and result.instrument == "cuobjdump", result.text
    assert "SASS rmsnorm_bf16:" in result.text and "mix: " in result.text
    assert "global load" in result.text and "shuffle" in result.text
    assert "LDG" in result.text  # the listing itself


def test_sanitize_finds_the_planted_out_of_bounds_write_at_its_line():
    _, line = planted_source()
    _, result, _ = _inspect("sanitize", planted_solution(), workload=0)
    assert result.ok, result.text
    assert "Invalid __global__ write" in result.text and f"rmsnorm.cu:{line}" in result.text, result.text


def test_sanitize_of_the_seed_is_clean():
    _, result, _ = _inspect("sanitize", seed_solution(), workload=0)
    assert "0 error(s)" in result.text, result.text


def test_ncu_parse_of_a_live_run_names_every_kernel():
    _, result, _ = _inspect("profile", seed_solution(), workload=0)
    assert result.text.count("diagnosis: ") >= 1
    assert ncu.short_name("rmsnorm_bf16") in result.text
