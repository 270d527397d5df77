"""One GPU of a Ray node: the class ``RayEvaluator`` makes a Ray actor of (``num_gpus=1``), owning a
``LocalEvaluator`` for that one GPU, so a job runs on a node exactly as it runs on the head's own GPUs: the build
there (its own ``BuildService``, that node's nvcc), the pool's judge and confined candidate processes, its kept
timing cores, its timing. Problems arrive as content (``core.cluster.content``), solutions as their dicts; results
go back as plain dicts (``core.cluster.wire``).

An async actor: Ray runs its methods on the actor's own asyncio loop, which anyio uses as it is. This module imports
Ray only inside methods, so it imports (and is tested for layering) where Ray is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from core.cache import cache_root
from core.cluster.content import NodeProblem, ProblemContent, node_problem
from core.cluster.folder import PathMap, pack_scratch, unpack_folder
from core.cluster.usage import usage_to_dict
from core.cluster.wire import BaselineReply, ConfinedReply, EvaluateReply, timing_from_dict
from core.evaluate import sandbox
from core.evaluate.cores import confine_process, plan_cores
from core.evaluate.evaluator import EvaluationRequest, Placement
from core.secrets import take_secrets
from core.solution.io import parse_solution

REAPER = Path(__file__).with_name("reaper.py")


def scrub_environment() -> list[str]:
    """Take every secret-looking variable out of this process's environment (and the block /proc shows), before it
    starts anything: a Ray worker inherits the environment of the ``ray start`` that made its node. Also drop the
    OMP_NUM_THREADS=1 Ray sets for an actor that reserves no CPU, which the head's own pool processes do not have.
    Returns the names taken."""
    taken = sorted(take_secrets())
    if "OMP_NUM_THREADS" in os.environ and "OMP_NUM_THREADS" not in _initial_names():
        del os.environ["OMP_NUM_THREADS"]
    return taken


def _initial_names() -> set[str]:
    try:
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except OSError:
        return set()
    return {entry.split(b"=", 1)[0].decode(errors="replace") for entry in block.split(b"\0") if b"=" in entry}


class GpuWorker:
    """``node_gpus`` and ``core_slot``: how many GPU actors share this node and which one this is, so each keeps
    timing cores of its own (as one pool keeps one per device) and all share the rest."""

    def __init__(self, device: str, *, workload_timeout_s: float = 120.0, spare: bool = True,
                 readable: list[str] | tuple[str, ...] = (), node_gpus: int = 1, core_slot: int = 0):
        self.scrubbed = scrub_environment()
        self.device = device
        self.pool_options: dict[str, Any] = {"spare": spare, "workload_timeout_s": workload_timeout_s,
                                             "readable": [r for r in readable if os.path.exists(r)]}
        self.node_gpus = max(1, node_gpus)
        self.core_slot = core_slot % self.node_gpus
        self.local = None
        self.problems: dict[str, NodeProblem] = {}
        self._loading: dict[str, anyio.Lock] = {}
        self.reaper: subprocess.Popen | None = None
        self.node_id = self.node = ""
        self.gpu: int | None = None
        self.model = ""

    async def start(self) -> dict[str, Any]:
        """Start the pool's processes and wait until they are ready; what the head records of this actor."""
        import ray

        from core.evaluate.local import LocalEvaluator
        from core.roofline.problem_sol import gpu_name_from_smi

        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.node = f"{socket.gethostname()}/{self.node_id[:8]}"
        ids = ray.get_gpu_ids()
        cuda = self.device == "cuda"
        self.gpu = int(ids[0]) if cuda and ids else None
        self.model = (await anyio.to_thread.run_sync(gpu_name_from_smi, self.gpu or 0) or "unknown GPU") if cuda \
            else "cpu"
        self.reaper = subprocess.Popen([sys.executable, "-I", str(REAPER), str(os.getpid())], stdin=subprocess.PIPE,
                                       env=sandbox.scrubbed_environment(os.environ), start_new_session=True)
        options = dict(self.pool_options)
        if cuda and not self._keep_cores():
            options["keep_timing_cores"] = False  # too few cores to give each GPU of this node its own
        # Ray shows this process its GPU alone (CUDA_VISIBLE_DEVICES), so it is index 0 here.
        self.local = LocalEvaluator(self.device, [0] if cuda else None, node=self.node, device_model=self.model,
                                    **options)
        await self.local.pool.wait_ready()
        return {"node_id": self.node_id, "node": self.node, "gpu": self.gpu, "device_model": self.model,
                "describe": self.local.describe(), "pid": os.getpid(), "scrubbed": self.scrubbed,
                "usage": self._usage()}

    def _keep_cores(self) -> bool:
        """Narrow this process to the node's shared cores plus this GPU's timing cores, so the pool (which keeps
        the top cores it sees for its one device) keeps this GPU's; False where the node has too few cores."""
        if self.node_gpus == 1:
            return True
        if not hasattr(os, "sched_getaffinity"):
            return False
        plan = plan_cores(os.sched_getaffinity(0), self.node_gpus)
        if plan is None:
            return False
        confine_process(plan.shared | plan.timing[self.core_slot])
        return True

    async def _problem(self, problem: dict[str, Any]) -> NodeProblem:
        key = str(problem["key"])
        if key not in self.problems:
            lock = self._loading.setdefault(key, anyio.Lock())
            async with lock:
                if key not in self.problems:
                    content = ProblemContent.from_wire(await problem["content"][0])
                    self.problems[key] = await anyio.to_thread.run_sync(
                        node_problem, content, cache_root() / "cluster" / "problems", self.node)
        return self.problems[key]

    async def evaluate(self, problem: dict[str, Any], solution: dict[str, Any], workloads: list[int] | None,
                       rounds: int, timing: dict[str, Any] | None, priority: int,
                       sol_ms: dict[int, float] | None) -> dict[str, Any]:
        """Build and evaluate one candidate; the verdict, the build report and where it ran."""
        started_wall, began = time.time(), time.monotonic()
        loaded = await self._problem(problem)
        request = EvaluationRequest(loaded.problem, parse_solution(solution),
                                    None if workloads is None else tuple(int(i) for i in workloads), rounds,
                                    timing_from_dict(timing), priority, loaded.blob_roots)
        if sol_ms:
            self.local.remember_sol(loaded.problem, {int(k): float(v) for k, v in sol_ms.items()})
        evaluation = await self.local.evaluate(request)
        placement = None if evaluation.placement is None else Placement(self.node, self.gpu, self.model)
        return json.loads(json.dumps(EvaluateReply(evaluation.verdict, evaluation.build, placement, self._usage(),
                                                   started_wall, time.monotonic() - began).to_wire()))

    async def baseline(self, problem: dict[str, Any], indices: list[int] | None, timing: dict[str, Any] | None,
                       compile_timeout_s: float, priority: int) -> dict[str, Any]:
        """T_b of the workloads on this GPU (``core.evaluate.baseline.WorkloadBaseline`` as dicts)."""
        started_wall, began = time.time(), time.monotonic()
        loaded = await self._problem(problem)
        results = await self.local.baseline(loaded.problem, indices, timing=timing_from_dict(timing),
                                            compile_timeout_s=compile_timeout_s, blob_roots=loaded.blob_roots,
                                            priority=priority)
        return json.loads(json.dumps(BaselineReply(tuple(results), Placement(self.node, self.gpu, self.model),
                                                   self._usage(), started_wall, time.monotonic() - began).to_wire()))

    async def run_confined(self, problem: dict[str, Any] | None, head: dict[str, str], files: dict[str, bytes],
                           requests: list[str], command: list[str], env: dict[str, str], timeout_s: float,
                           priority: int) -> dict[str, Any]:
        """A confined command (``RayEvaluator.run_confined``) in a folder of this node's made from ``files``, with
        the head's paths read as this node's (``core.cluster.folder``); its outcome, in the head's paths, and what
        it left in its scratch folder."""
        started_wall, began = time.time(), time.monotonic()
        loaded = await self._problem(problem) if problem is not None else None
        root = Path(tempfile.mkdtemp(prefix="kf-inspect-"))
        try:
            pairs = {head["folder"]: str(root), head["python"]: sys.executable}
            if loaded is not None and head.get("problem"):
                pairs[head["problem"]] = str(loaded.problem.path)
            here, back = PathMap(pairs), PathMap({node: path for path, node in pairs.items()})
            blob_roots = loaded.blob_roots if loaded is not None else ()
            unpack_folder({named: here.request(data, blob_roots) if named in requests else data
                           for named, data in files.items()}, root, "the head's folder")
            scratch = root / head["scratch"]
            scratch.mkdir(exist_ok=True)
            outcome = await self.local.run_confined([here.text(a) for a in command], scratch,
                                                    {k: here.text(v) for k, v in env.items()}, timeout_s, priority)
            left, left_out = await anyio.to_thread.run_sync(pack_scratch, scratch)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return ConfinedReply(outcome.returncode, back.text(outcome.output), left, tuple(left_out), self._usage(),
                             started_wall, time.monotonic() - began).to_wire()

    async def device_model(self) -> str:
        return self.model

    async def usage(self) -> dict[str, Any]:
        return self._usage()

    def _usage(self) -> dict[str, Any]:
        return usage_to_dict(self.local.usage) if self.local is not None else {"devices": 1}

    async def visible(self, text: str) -> list[str]:
        """Where ``text`` (say, a secret's value) can be read in this process: its environment, the environment
        block it started with (/proc/self/environ). Empty when nowhere."""
        places = []
        if any(text in value or text in name for name, value in os.environ.items()):
            places.append("os.environ")
        try:
            with open("/proc/self/environ", "rb") as f:
                if text.encode() in f.read():
                    places.append("/proc/self/environ")
        except OSError:
            pass
        return places

    async def processes(self) -> list[int]:
        """This actor's child processes (pool workers, builds, the reaper), for tests and for a person."""
        mine = os.getpid()
        children = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == mine:
                            children.append(int(name))
                except (OSError, IndexError, ValueError):
                    continue
        return sorted(children)

    async def close(self) -> None:
        """End every process this actor started."""
        if self.local is not None:
            self.local.close()
            self.local = None
        if self.reaper is not None:
            self.reaper.stdin.close()
            try:
                self.reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.reaper.kill()
            self.reaper = None
