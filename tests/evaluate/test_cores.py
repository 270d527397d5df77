"""Cores kept for the processes that time candidates (core.evaluate.cores), and the worker processes that get them."""

from __future__ import annotations

import os
import threading

import pytest

from core.evaluate.cores import confine_process, plan_cores
from core.evaluate.worker_process import WorkerProcess


def hyperthreads(cores: int):
    half = cores // 2
    return lambda core: [core % half, core % half + half]


def single_threads(core: int):
    return [core]


@pytest.mark.parametrize("cores, devices, siblings, kept, shared", [
    (32, 2, single_threads, [{28, 29}, {30, 31}], set(range(28))),
    (32, 2, hyperthreads(32), [{14, 30}, {15, 31}], set(range(14)) | set(range(16, 30))),
    (16, 1, hyperthreads(16), [{7, 15}], set(range(7)) | set(range(8, 15))),
])
def test_each_device_gets_whole_physical_cores_from_the_top(cores, devices, siblings, kept, shared):
    plan = plan_cores(range(cores), devices, siblings)
    assert [set(c) for c in plan.timing] == kept
    assert set(plan.shared) == shared


@pytest.mark.parametrize("cores, devices", [(2, 1), (3, 1), (6, 2), (16, 8)])
def test_a_machine_too_small_keeps_no_cores(cores, devices):
    assert plan_cores(range(cores), devices, single_threads) is None


def test_only_the_cores_this_process_may_use_are_planned():
    plan = plan_cores([0, 2, 4, 6, 8, 10, 12], 1, single_threads)
    assert set(plan.timing[0]) == {10, 12} and set(plan.shared) == {0, 2, 4, 6, 8}


def test_the_plan_reads_as_core_ranges():
    assert plan_cores(range(32), 2, single_threads).describe() == (
        "cores kept for timing candidates: device 0: 28-29; device 1: 30-31; everything else on 0-27")


def allowed(pid: int | str) -> set[int]:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("Cpus_allowed_list:"))
    listed = set()
    for part in line.split(":", 1)[1].strip().split(","):
        first, _, last = part.partition("-")
        listed.update(range(int(first), int(last or first) + 1))
    return listed


@pytest.fixture
def restored_affinity():
    before = os.sched_getaffinity(0)
    yield before
    confine_process(frozenset(before))


def test_confining_the_process_moves_every_thread_and_what_it_starts(restored_affinity):
    one = frozenset({min(restored_affinity)})
    started, release = threading.Event(), threading.Event()
    seen = {}

    def waiter():
        seen["tid"] = threading.get_native_id()
        started.set()
        release.wait(10)

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait(10)
    try:
        confine_process(one)
        assert allowed(f"self/task/{seen['tid']}") == set(one)  # a thread already running
        assert os.sched_getaffinity(0) == set(one)
    finally:
        release.set()
        thread.join()


def test_a_candidate_process_starts_on_its_kept_cores_and_a_judge_does_not(tmp_path, restored_affinity):
    kept = frozenset({max(restored_affinity)})
    candidate = WorkerProcess("candidate", "cpu", None, tmp_path, kept)
    judge = WorkerProcess("judge", "cpu", None, tmp_path)
    try:
        assert allowed(candidate.proc.pid) == set(kept)
        assert allowed(judge.proc.pid) == set(restored_affinity)
    finally:
        candidate.close()
        judge.close()
