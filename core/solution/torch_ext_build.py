"""kernelfleet's build of a torch extension: torch's own commands, one process per TU in parallel, objects and
precompiled headers cached, then torch's link and an import check (what ``cpp_extension.load`` does, faster).

Runs inside the build subprocess that ``core.solution.torch_ext`` starts in a process group of its own: every
compiler started here dies with that group on timeout or cancellation. Prints a log in the manner of ninja's
verbose output (the command, then what the compiler said), which ``summarize_build_log`` reads.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from core.solution import torch_ext_pch as pch
from core.solution.torch_ext_commands import fill_compile, torch_commands
from core.solution.torch_ext_objects import ObjectCache, object_key, toolchain_identity

BUILD_SUMMARY = "kernelfleet: build summary "  # followed by JSON, the last line of a successful build


@dataclass(frozen=True)
class Unit:
    source: str  # relative to the solution folder
    argv: tuple[str, ...]
    key: str
    output: Path  # where the compiler writes it (inside the build folder)
    pch: pch.PchPlan | None
    pch_used: bool  # its flags are on the command (the PCH was ready)


def job_count(jobs: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(jobs, cores))


def run_command(argv, cwd: Path) -> tuple[int, str]:
    completed = subprocess.run(list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    return completed.returncode, completed.stdout.decode(errors="replace")


def build(request: dict) -> int:
    started = time.monotonic()
    src, build_dir = Path(request["src"]), Path(request["build_directory"])
    name = request["name"]
    objects = ObjectCache(Path(request["objects_dir"]))
    objects.remove_stale_work()
    sources = [str(src / p) for p in request["sources"]]
    commands = torch_commands(
        name=name, sources=sources, include_dirs=[str(src), *request.get("include_extra", ())],
        cflags=request["cflags"], cuda_cflags=request["cuda_cflags"], ldflags=request["ld_flags"],
        with_cuda=request["with_cuda"], build_dir=build_dir,
    )
    headers = {p: (src / p).read_text(encoding="utf-8", errors="replace") for p in request["headers"]}
    placeholders = {str(src): "<solution>", str(build_dir): "<build>"}
    per_candidate = {f"-DTORCH_EXTENSION_NAME={name}", f"-I{src}", *request["defines"]}
    use_pch = pch.enabled()

    units: list[Unit] = []
    for relative, absolute in zip(request["sources"], sources):
        template = commands.compile_template(absolute)
        text = (src / relative).read_text(encoding="utf-8", errors="replace")
        toolchain = toolchain_identity(template)
        key = object_key(source=relative, text=text, headers=headers, template=template,
                         placeholders=placeholders, name=name, toolchain=toolchain)
        output = build_dir / f"{key[:16]}-{Path(relative).name}.o"
        plan = None
        if use_pch and commands.rule_of[absolute] == "compile":
            plan = pch.plan_pch(text, template, drop=sorted(per_candidate), shadowing_dirs=[src],
                                cache_dir=Path(request["pch_dir"]), toolchain=toolchain)
        argv = fill_compile(template, relative, str(output))
        pch_used = plan is not None and plan.ready
        if pch_used:
            argv = [argv[0], *pch.use_flags(plan), *argv[1:]]
            pch.touch(plan)
        units.append(Unit(relative, tuple(argv), key, output, plan, pch_used))

    object_of = {u.source: found for u in units if (found := objects.get(u.key)) is not None}
    to_compile = [u for u in units if u.source not in object_of]
    pch_jobs = {u.pch.folder: u.pch for u in units if u.pch is not None and not u.pch.ready}
    for unit in units:
        if unit.source in object_of:
            print(f"kernelfleet: reused the object of {unit.source}", flush=True)

    pch_state = {u.source: "used" if u.pch_used else "building" for u in to_compile if u.pch is not None}
    failed = False
    with ThreadPoolExecutor(max_workers=job_count(len(to_compile))) as pool:
        compiles = [(u, pool.submit(run_command, u.argv, src)) for u in to_compile]
        for unit, future in compiles:
            code, output = future.result()
            print(f"[compile {unit.source}] {' '.join(unit.argv)}\n{output}", end="" if output.endswith("\n") else "\n",
                  flush=True)
            if unit.pch_used and pch.REJECTED.search(output):
                pch_state[unit.source] = "rejected"
                print(f"kernelfleet: the precompiled {unit.pch.header} did not fit {unit.source}; "
                      "it was compiled from the header", flush=True)
            if code != 0:
                failed = True
                print(f"kernelfleet: compiling {unit.source} failed with status {code}", flush=True)
            else:
                object_of[unit.source] = objects.put(unit.key, unit.output)
    if failed:
        return 1
    # The PCHs this build could not use, built for the next ones by processes of their own: this one does not wait.
    for plan in pch_jobs.values():
        started_pch = pch.spawn(plan)
        print(f"kernelfleet: pch {plan.header} " + ("being built for the next builds" if started_pch else
                                                      "not started here (being built, or no process)"), flush=True)

    library = build_dir / f"{name}.so"
    link = commands.link_argv([str(object_of[u.source]) for u in units], str(library))
    code, output = run_command(link, build_dir)
    print(f"[link] {' '.join(link)}\n{output}", flush=True)
    if code != 0:
        return 1
    _import_check(name, library)
    summary = {
        "compiled": [u.source for u in to_compile],
        "reused": [u.source for u in units if u.source not in {c.source for c in to_compile}],
        "pch": pch_state,
        "seconds": round(time.monotonic() - started, 3),
    }
    print(BUILD_SUMMARY + _json(summary), flush=True)
    return 0


def _import_check(name: str, library: Path) -> None:
    """Load the library as the worker will (a missing symbol or a wrong PyInit surfaces now, in the build log)."""
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _json(data) -> str:
    import json

    return json.dumps(data, sort_keys=True)


if __name__ == "__main__":
    sys.exit("run through core.solution.torch_ext")
