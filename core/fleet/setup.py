"""A run's start: its problems loaded and checked, its lock taken, its store opened (or resumed, with the stored
config), its secrets taken, its device chosen, its problems and agents registered. ``FleetError`` says why a run
cannot start."""

from __future__ import annotations

from dataclasses import replace

from core.build import BuildService
from core.config import config_to_dict, parse_config
from core.evaluate import TimingPolicy
from core.evaluate.hosts import backend_named
from core.evaluate.timing_policy import QUICK_TIMING
from core.fleet import capability
from core.fleet.budget import Budgets
from core.fleet.context import FleetError, RunContext
from core.fleet.controls import drop_stale_stops
from core.fleet.gpus import detect_gpus, gpu_memory_bytes
from core.planner.model import UNRUNNABLE, WAITING
from core.problem import load_problems as load_problem_paths
from core.secrets import redact, take_secrets
from core.store.check import NotARunStore, check_store_file
from core.store.lock import RunLock, RunLocked
from core.store.schema import DB_NAME
from core.store.writer import RunStore, StoreError

def load_problems(run: RunContext):
    try:
        loaded = load_problem_paths(run.problem_paths)
    except OSError as exc:
        raise FleetError(str(exc) if str(exc).startswith("/") else f"{exc.filename or ''}: "
                         f"{exc.strerror or exc}") from None
    if loaded.invalid:
        first = loaded.invalid[0]
        raise FleetError(f"{len(loaded.invalid)} problem(s) are malformed; first: {first.errors[0]}"
                         if first.errors else f"{first.path}: malformed problem")
    if not loaded.problems:
        raise FleetError(f"no problems found under {', '.join(run.problem_paths) or '(no paths)'}")
    return loaded


def lock_run(run: RunContext) -> RunLock:
    """Take the run's lock before its store is opened for writing (a resume's store is checked read-only
    first, so a folder that holds no run gets no lock file): a second orchestrator on a live run is refused
    with who holds it."""
    if run.resume:
        try:
            check_store_file(run.run_dir / DB_NAME)
        except NotARunStore as exc:
            raise FleetError(str(exc)) from None
    try:
        return RunLock.acquire(run.run_dir)
    except RunLocked as exc:
        raise FleetError(str(exc)) from None


def open_run(run: RunContext, loaded) -> None:
    """Open the store (the lock held) and register the run's problems and agents; ``loaded``: a new run's problems,
    checked before anything was written (None on resume: the stored paths are loaded)."""
    try:
        run.store = RunStore(run.run_dir, create=not run.resume)
    except StoreError as exc:
        raise FleetError(str(exc)) from None
    info = run.store.run_info()
    if run.resume:
        if info is None:
            raise FleetError(f"{run.run_dir}: the run never started; start it again without --resume")
        run.config = parse_config(info.config, source=f"{run.run_dir} (stored config)")
        run.problem_paths = list(info.problem_paths)
    elif info is not None:
        raise FleetError(f"{run.run_dir} already holds a run: continue it with --resume, or pick another --run-dir")
    # Before any child process starts (nvidia-smi below, builds, workers): none inherits a secret.
    run.profiles.configure(run.kinds, run.config)  # the stored config's, on resume
    take_secrets([name for kind in run.kinds.values() for name in kind.secrets(run.config)])
    run.store.redact = redact
    loaded = loaded or load_problems(run)
    _choose_devices(run)
    if info is None:
        run.store.init_run(config_to_dict(run.config), run.problem_paths, run.device, run.gpus, run.gpu_name)
    run.timing = replace(QUICK_TIMING if run.config.evaluation.timing == "quick" else TimingPolicy(),
                         kernel_spans=run.config.evaluation.kernel_spans)
    skipped = _add_problems(run, loaded)
    _add_agents(run)
    # The log opens with what the run will do (or why it can do nothing).
    assessed = [capability.assess(p, run.config) for p in run.problems.values()]
    line = capability.cannot_improve_line(assessed, run.config) or capability.work_line(assessed, run.config)
    if line:
        run.event("log", line)
    for problem_id, index, why in skipped:
        where = "cpu" if run.device == "cpu" else "GPU"
        run.event("log", f"workload {index} skipped on the {where}: {why}", problem_id=problem_id)
    _mark_unrunnable(run)
    run.profiles.restore(run.store)
    if run.resume:
        drop_stale_stops(run)
    for agent in run.store.agents():
        if agent.state == "stopped":  # stopped by the last start (its endpoint was down): a new start tries again
            run.store.update_agent(agent.id, state="idle", problem_id=None)
        run.assignment[agent.id] = agent.problem_id if agent.problem_id in run.problems else None
    run.budgets = Budgets(run.store, run.config.budgets)
    run.builds = BuildService()
    run.started = run.store.run_info().created_at


def _choose_devices(run: RunContext) -> None:
    device = run.config.fleet.device
    cluster = run.config.cluster
    here = backend_named(cluster.backend, cluster.ray_address).local_devices  # else the head may have no GPU
    gpus = list(run.config.gpus.ids) or (detect_gpus() if device == "cuda" and here else [])
    if device == "cuda" and not gpus and here:
        raise FleetError("no CUDA GPU found: set [fleet] device = \"cpu\" (pytorch candidates only) or "
                         "list [gpus] ids")
    run.device, run.gpus = device, gpus
    run.gpu_name = ""
    if device == "cuda" and gpus:
        from core.roofline.problem_sol import gpu_name_from_smi

        run.gpu_name = gpu_name_from_smi(gpus[0])


def _add_problems(run: RunContext, loaded) -> list[tuple[int, int, str]]:
    """Register the loaded problems; the workloads skipped on this device, (problem id, index, why)."""
    skipped: list[tuple[int, int, str]] = []
    # On the GPU, workloads too large for the smallest of the run's GPUs are known before any is measured.
    sizes = [gpu_memory_bytes(gpu) for gpu in run.gpus] if run.device == "cuda" else []
    memory = min(sizes) if sizes and None not in sizes else None
    for problem in loaded.problems:
        key = f"{problem.subset}/{problem.name}"
        op = problem.definition.op_type
        problem_id = run.store.add_problem(key, problem.name, problem.subset, str(problem.path), op or "")
        # GPU-sized workloads on the CPU, too large ones on a GPU: unavailable (core.fleet.capability), said below.
        run.problems[problem_id], skips = capability.for_device(problem, run.device, memory,
                                                                run.config.gpus.memory_budget)
        skipped += [(problem_id, index, why) for index, why in skips]
        run.keys[problem_id] = key
    return skipped


def _mark_unrunnable(run: RunContext) -> None:
    """Problems none of whose workloads can run on this machine are known before any agent is assigned: never
    prepared, never assigned, and said so with why. One that can run again (its blobs came back) reopens."""
    for problem_id, problem in run.problems.items():
        row = run.store.problem(problem_id)
        reasons = sorted({w.unavailable for w in problem.workloads if w.unavailable})
        if len(reasons) and all(w.unavailable for w in problem.workloads):
            run.unrunnable.add(problem_id)
            if row.status != UNRUNNABLE:
                run.store.update_problem(problem_id, status=UNRUNNABLE)
            run.event("decision", f"{UNRUNNABLE}: no workload can run here ({'; '.join(reasons[:2])}"
                                  f"{'; ...' if len(reasons) > 2 else ''}); no agent will be assigned",
                      problem_id=problem_id)
        elif row.status == UNRUNNABLE:
            run.store.update_problem(problem_id, status=WAITING)
            run.event("decision", f"{WAITING}: its workloads can run again", problem_id=problem_id)


def _add_agents(run: RunContext) -> None:
    for kind in run.kinds.values():
        for n in range(1, kind.count(run.config) + 1):
            profile = run.profiles.start_profile(kind.name, n)
            model = run.profiles.model(kind.name, profile) if profile else kind.model(run.config)
            run.store.add_agent(f"{kind.name}-{n}", kind.name, model, profile)
    for agent in run.store.agents():
        run.names[agent.id] = agent.name
    unknown = sorted({a.kind for a in run.store.agents()} - set(run.kinds))
    if unknown:
        raise FleetError(f"{run.run_dir}: agents of unknown kind {', '.join(unknown)} (registered: "
                         f"{', '.join(run.kinds)})")
