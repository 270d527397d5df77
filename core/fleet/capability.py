"""Before a run starts: what its agents can work on, on its device, and the workloads too large for the CPU.

A run whose agents can work on nothing only measures baselines and seeds, then ends; on the CPU that was every
default run (every bundled seed was CUDA, the reference declares no tunables, no LLM agent by default). This module
decides it up front, so the run can say so in one line with what to change, and so that a default run picks the
problems it can improve. It reads problems and the config only: no candidate code is imported or run here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from core.config import FleetConfig
from core.errors import SpecError
from core.fleet.kinds import registered
from core.fleet.seeds import pick_seed
from core.problem.schema import Problem
from core.roofline.counting import analytic_io_bytes
from core.solution.io import solution_to_dict
from core.store.model import AttemptRow

# A workload reading and writing more than this is GPU-sized: on the CPU its baseline alone (eager and
# torch.compile, several timed calls, rounds of fresh inputs) takes minutes, and every trial again. The bundled
# problems' first workloads (the tiny ones) are well under it; their realistic GPU sizes are over.
CPU_WORKLOAD_MAX_BYTES = 16 << 20
CPU_SKIP_REASON = (f"skipped on the cpu: over {CPU_WORKLOAD_MAX_BYTES >> 20} MiB of inputs and outputs (a GPU-sized "
                   f"workload)")


@dataclass(frozen=True)
class ProblemCapability:
    problem: Problem
    seed_origin: str  # where the run's seed would come from (core.fleet.seeds.pick_seed)
    seed_language: str
    workers: tuple[str, ...]  # the agent kinds of this config that can work on it from its seed
    why_not: str  # when no kind can: why, in a few words
    skipped: tuple[tuple[int, str], ...]  # (workload index, why) of workloads the CPU leaves out

    @property
    def key(self) -> str:
        return f"{self.problem.subset}/{self.problem.name}"

    @property
    def improvable(self) -> bool:
        return bool(self.workers)


def cpu_skips(problem: Problem) -> tuple[tuple[int, str], ...]:
    """The runnable workloads over CPU_WORKLOAD_MAX_BYTES of inputs and outputs, each with why."""
    skips = []
    for workload in problem.workloads:
        if workload.unavailable:
            continue
        read, written = analytic_io_bytes(problem, workload)
        if read + written > CPU_WORKLOAD_MAX_BYTES:
            skips.append((workload.index, f"{(read + written) / 2**20:.0f} MiB of inputs and outputs, over the CPU "
                                          f"cap of {CPU_WORKLOAD_MAX_BYTES >> 20} MiB (a GPU-sized workload)"))
    return tuple(skips)


# What a workload needs of the device's memory at least: its inputs, the reference's outputs and the candidate's;
# over the run's share of the device's memory (``[gpus] memory_budget``), it cannot be judged there.
DEVICE_MEMORY_SHARE = 0.9  # the share where the run names none


def device_skips(problem: Problem, memory_bytes: int, share: float = DEVICE_MEMORY_SHARE
                 ) -> tuple[tuple[int, str], ...]:
    """The runnable workloads too large for ``share`` of a GPU of ``memory_bytes``, each with why."""
    skips = []
    for workload in problem.workloads:
        if workload.unavailable:
            continue
        read, written = analytic_io_bytes(problem, workload)
        needed = read + 2 * written
        if needed > share * memory_bytes:
            skips.append((workload.index, f"too large for the device: its inputs and two copies of its outputs "
                                          f"need {needed / 2**30:.1f} GiB, over {share:.0%} of the "
                                          f"GPU's {memory_bytes / 2**30:.0f} GiB"))
    return tuple(skips)


def for_device(problem: Problem, device: str, memory_bytes: int | None = None, share: float = DEVICE_MEMORY_SHARE
               ) -> tuple[Problem, tuple[tuple[int, str], ...]]:
    """The problem as a run on ``device`` evaluates it: on the CPU, its GPU-sized workloads marked unavailable
    (skipped, with the reason, in every verdict); on a GPU of ``memory_bytes`` (when known), those too large for
    the run's ``share`` of it; and which they are."""
    if device == "cpu":
        skips = tuple((index, CPU_SKIP_REASON, why) for index, why in cpu_skips(problem))
    else:
        skips = tuple((index, why, why) for index, why in device_skips(problem, memory_bytes, share)) if memory_bytes \
            else ()
    if not skips:
        return problem, ()
    marked = {index: reason for index, reason, _ in skips}
    workloads = tuple(dataclasses.replace(w, unavailable=marked[w.index]) if w.index in marked else w
                      for w in problem.workloads)
    return dataclasses.replace(problem, workloads=workloads), tuple((index, why) for index, _, why in skips)


def assess(problem: Problem, config: FleetConfig) -> ProblemCapability:
    device = config.fleet.device
    languages = tuple(config.fleet.languages)
    skipped = cpu_skips(problem) if device == "cpu" else ()
    try:
        seed, origin = pick_seed(problem, device, languages)
    except SpecError as exc:  # the reference itself cannot be made a solution
        return ProblemCapability(problem, "", "", (), f"no seed: {exc}", skipped)
    language = seed.spec.languages[0].value
    runnable = [w for w in problem.workloads if not w.unavailable]
    if not runnable or len(skipped) == len(runnable):
        why = "every workload is over the CPU size cap" if runnable else "no workload can be built here"
        return ProblemCapability(problem, origin, language, (), why, skipped)
    # Asked of every registered kind the config has agents of, as the run asks them (core.fleet.kinds).
    seed_row = AttemptRow(0, 0, None, None, "done", 0.0, 0.0, language, solution_to_dict(seed), "", {}, "seed", None,
                          None, None, "PASSED", "")
    workers = tuple(kind.name for kind in registered().values()
                    if kind.count(config) > 0 and kind.make(config).can_work_on(seed_row, (), seed_row))
    why = "" if workers else _why_no_agent(origin, language, config)
    return ProblemCapability(problem, origin, language, workers, why, skipped)


def _why_no_agent(origin: str, language: str, config: FleetConfig) -> str:
    if config.fleet.tuner_agents == 0:
        tuner = "no tuner agent ([fleet] tuner_agents = 0)"
    elif origin.startswith("solutions/"):
        tuner = f"its seed {origin} declares no tunables"
    else:
        tuner = f"no shipped seed fits {config.fleet.device} and {'/'.join(config.fleet.languages)} (the " \
                f"reference is the seed, with no tunables)"
    if config.compiler.agents == 0:
        compiler = "no compiler agent ([compiler] agents = 0)"
    elif "pytorch" not in config.fleet.languages:
        compiler = "no compiler agent (its candidates are pytorch, not among [fleet] languages)"
    elif config.fleet.device == "cpu" and not config.compiler.cpu:
        compiler = "no compiler agent on the cpu ([compiler] cpu = false)"
    else:
        compiler = f"the compiler agent leaves problems with a seed kernel alone ([compiler] problems = " \
                   f"\"{config.compiler.problems}\")"
    return f"{tuner}, {compiler}, and no LLM agent ([fleet] llm_agents = 0)"


def cannot_improve_line(assessed: list[ProblemCapability], config: FleetConfig) -> str | None:
    """One line when no agent of the config can work on any problem: what cannot work, and what to change."""
    if not assessed or any(a.improvable for a in assessed):
        return None
    device = config.fleet.device
    reasons = sorted({a.why_not for a in assessed})
    fixes = []
    if config.fleet.tuner_agents > 0:
        fixes.append("ship a pytorch seed with a tunables.json in a problem's solutions/" if device == "cpu" else
                     "ship a seed with a tunables.json in a problem's solutions/")
    else:
        fixes.append("set [fleet] tuner_agents")
    if "pytorch" in config.fleet.languages:
        if not config.compiler.agents:
            fixes.append("set [compiler] agents")
        elif device == "cpu" and not config.compiler.cpu:
            fixes.append("set [compiler] cpu = true")
        elif config.compiler.problems != "all":
            fixes.append("set [compiler] problems = \"all\"")
    fixes.append("set [fleet] llm_agents and an [llm] base_url and model")
    if device == "cpu":
        fixes.append("run on a GPU with --device cuda")
    return (f"nothing in this run can improve: no agent can work on any of the {len(assessed)} problem(s) on the "
            f"{device} ({'; '.join(reasons[:2])}{'; ...' if len(reasons) > 2 else ''}); to change that, "
            + ", or ".join(fixes))


def work_line(assessed: list[ProblemCapability], config: FleetConfig) -> str | None:
    """One line saying what the run's agents will do, and on how many of its problems; None when none can."""
    working: dict[str, int] = {}
    for capable in assessed:
        for name in capable.workers:
            working[name] = working.get(name, 0) + 1
    if not working:
        return None
    kinds = registered()
    parts = []
    for name, problems in working.items():
        kind = kinds[name]
        does = f" ({kind.does})" if kind.does else ""
        parts.append(f"{kind.count(config)} {name} agent(s){does} on {problems} of {len(assessed)} problem(s)")
    return "this run: " + "; ".join(parts)


def improvable_folders(assessed: list[ProblemCapability]) -> list[Path]:
    """The folders of the problems an agent can work on, those with the least data to measure first: problems are
    prepared in this order, so the agents start on the quickest one soonest."""
    chosen = [a for a in assessed if a.improvable]
    return [Path(a.problem.path) for a in sorted(chosen, key=_bytes_evaluated)]


def _bytes_evaluated(assessed: ProblemCapability) -> int:
    skipped = {index for index, _ in assessed.skipped}
    return sum(sum(analytic_io_bytes(assessed.problem, w)) for w in assessed.problem.workloads
               if not w.unavailable and w.index not in skipped)
