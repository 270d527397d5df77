"""Every problem in problems/ ships a CUDA seed (solutions/seed_cuda.json) that loads and builds with nvcc.

The seeds are the starting points that agents and the tuner improve: plain `extern "C"` kernels on the fast path
(cuda_cpp with a main.py entry). This builds them all for the H200's architecture (sm_90a) through
core.solution.prepare, concurrently through one BuildService in one event loop, into a temporary cache, and
checks the ptxas report: no compile errors, static shared memory within 48 KB, no register spills.
Runs without a GPU; skipped where nvcc is missing. The GPU side (correctness on every workload) is
test_seed_solutions_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from core.build import BuildService
from core.build.nvcc import find_nvcc
from core.problem import find_problem_dirs, load_problem
from core.solution import get_tunables, load_solution, prepare, with_values

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "problems"
SEED = Path("solutions") / "seed_cuda.json"
ARCH = "sm_90a"  # the H200
STATIC_SMEM_LIMIT = 48 * 1024

PROBLEM_DIRS = find_problem_dirs([PROBLEMS])
IDS = [f"{d.parent.name}/{d.name}" for d in PROBLEM_DIRS]

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")


def test_there_are_problems():
    assert len(PROBLEM_DIRS) >= 21


@pytest.mark.parametrize("problem_dir", PROBLEM_DIRS, ids=IDS)
def test_problem_has_a_loadable_cuda_seed(problem_dir):
    path = problem_dir / SEED
    assert path.is_file(), f"{path} is missing"
    solution = load_solution(path)
    problem = load_problem(problem_dir)
    assert solution.definition == problem.definition.name
    spec = solution.spec
    assert [lang.value if hasattr(lang, "value") else lang for lang in spec.languages] == ["cuda_cpp"]
    assert spec.binding is None
    assert spec.entry_point == "main.py::run"
    assert spec.destination_passing_style is True
    assert any(s.path.endswith(".cu") for s in solution.sources)
    assert solution.source("main.py") is not None


@pytest.fixture(scope="module")
def built_seeds(tmp_path_factory):
    cache = tmp_path_factory.mktemp("seed-build-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("KERNELFLEET_CACHE_DIR", str(cache))
    mp.setenv("KERNELFLEET_CUDA_ARCH", ARCH)
    try:
        configs = [(d, load_solution(d / SEED)) for d in PROBLEM_DIRS if (d / SEED).is_file()]
        results: dict = {}
        anyio.run(_build_all_into, configs, cache / "builds", results)
        return results
    finally:
        mp.undo()


async def _build_all_into(configs, cache_dir, results):
    service = BuildService(cache_dir=cache_dir)

    async def one(key, solution):
        results[key] = await prepare(solution, service, arch=ARCH)

    async with anyio.create_task_group() as group:
        for key, solution in configs:
            group.start_soon(one, key, solution)


def _check_build(name, prepared):
    assert prepared.ok, f"{name}: the seed does not build:\n{prepared.errors}\n{prepared.log[-3000:]}"
    assert prepared.cubins, f"{name}: no cubin"
    resources = prepared.build.resources
    assert resources, f"{name}: ptxas reported no kernels"
    report = "\n".join(
        f"  {r.name}: {r.registers} registers, {r.shared_bytes} B smem, spills {r.spill_stores}/{r.spill_loads} B, "
        f"stack {r.stack_bytes} B" for r in resources
    )
    for r in resources:
        assert r.shared_bytes <= STATIC_SMEM_LIMIT, f"{name}: {r.name} uses more than 48 KB static smem\n{report}"
        assert r.spill_stores == 0 and r.spill_loads == 0, f"{name}: {r.name} spills registers\n{report}"


@needs_nvcc
@pytest.mark.parametrize("problem_dir", PROBLEM_DIRS, ids=IDS)
def test_seed_builds_for_sm90a(problem_dir, built_seeds):
    assert problem_dir in built_seeds, f"{problem_dir / SEED} is missing"
    _check_build(problem_dir.name, built_seeds[problem_dir])


@needs_nvcc
def test_every_tunable_option_builds(tmp_path):
    """Each tunable option, the others at their chosen values, builds cleanly (options are valid everywhere)."""
    configs = []
    for d in PROBLEM_DIRS:
        if not (d / SEED).is_file():
            continue
        solution = load_solution(d / SEED)
        tunables = get_tunables(solution)
        if tunables is None:
            continue
        for name, options in tunables.space.items():
            for option in options:
                if option != tunables.values[name]:
                    configs.append(((d.name, name, option), with_values(solution, {name: option})))
    results: dict = {}
    anyio.run(_build_all_into, configs, tmp_path / "builds", results)
    for key, prepared in sorted(results.items(), key=lambda kv: str(kv[0])):
        _check_build(f"{key[0]} with {key[1]}={key[2]}", prepared)
