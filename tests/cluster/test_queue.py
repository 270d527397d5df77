"""The head's queue (RayEvaluator): jobs wait for an actor with room, highest priority first then in arrival order,
spread over the actors; an actor lost leaves the queue to the others, one that joins takes from it at once, and a
cluster left with no GPU for orphan_timeout_s fails the waiting jobs with one clear error. No Ray: the actors are
what the head knows of them."""

from __future__ import annotations

import anyio
import pytest

from core.cluster import ClusterError, RayEvaluator
from core.cluster.ray_evaluator import GpuActor


def _actor(n: int) -> GpuActor:
    return GpuActor(f"node{n}:0:{n}", None, f"node{n}", 0, f"host/node{n}", None, "cpu")


def _evaluator(*actors: GpuActor, **options) -> RayEvaluator:
    evaluator = RayEvaluator("127.0.0.1:6379", "cpu", **options)
    for actor in actors:
        evaluator._actors[actor.key] = actor
    return evaluator


def test_higher_priority_first_then_arrival_order():
    evaluator = _evaluator(_actor(0), jobs_per_gpu=1)
    served = []

    async def main():
        busy = await evaluator._acquire((0, 0), None)

        async def job(priority: int, arrival: int) -> None:
            actor = await evaluator._acquire((-priority, arrival), None)
            served.append((priority, arrival))
            evaluator._release(actor)

        async with anyio.create_task_group() as tg:
            for arrival, priority in enumerate([0, 5, 1, 5, 0], start=1):
                tg.start_soon(job, priority, arrival)
            await anyio.sleep(0.05)
            assert served == [] and len(evaluator._waiting) == 5
            evaluator._release(busy)

    anyio.run(main)
    assert served == [(5, 2), (5, 4), (1, 3), (0, 1), (0, 5)]


def test_jobs_spread_and_each_actor_takes_jobs_per_gpu():
    actors = [_actor(0), _actor(1)]
    evaluator = _evaluator(*actors, jobs_per_gpu=2)

    async def main():
        got = [await evaluator._acquire((0, n), None) for n in range(4)]
        assert [a.key for a in got].count(actors[0].key) == 2 and [a.key for a in got].count(actors[1].key) == 2
        assert got[0] is not got[1]  # the second job goes to the idle actor, not beside the first
        with anyio.move_on_after(0.2):
            await evaluator._acquire((0, 5), None)
            pytest.fail("a fifth job found room on two actors of two jobs each")
        assert evaluator._waiting == []  # the cancelled wait left the queue

    anyio.run(main)


def test_a_lost_actor_leaves_the_queue_to_others_and_a_joined_one_serves_it():
    first = _actor(0)
    evaluator = _evaluator(first, jobs_per_gpu=1, poll_s=0.05)

    async def main():
        held = await evaluator._acquire((0, 0), None)
        evaluator._lose(first, "its node left the cluster")
        assert evaluator.placements() == [] and evaluator.usage.lost == 1
        evaluator._release(held)
        waiter_got = []

        async def wait() -> None:
            waiter_got.append(await evaluator._acquire((0, 1), None))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.2)
            assert waiter_got == []  # nothing to run on: it waits (a node may join)
            joined = _actor(1)
            evaluator._add(joined, {"devices": 1})
        assert waiter_got == [joined] and evaluator.usage.joined == 1
        assert any("GPU actor lost" in line for line in evaluator.history)

    anyio.run(main)


def test_no_gpu_left_for_too_long_is_one_clear_error():
    only = _actor(0)
    evaluator = _evaluator(only, poll_s=0.05, orphan_timeout_s=0.2)

    async def main():
        evaluator._lose(only, "its node left the cluster")
        with anyio.fail_after(5), pytest.raises(ClusterError) as info:
            await evaluator._acquire((0, 0), None)
        assert str(info.value) == ("every GPU actor of the Ray cluster at 127.0.0.1:6379 was lost, and no GPU came "
                                   "back within 0.2 s")
        assert evaluator._waiting == []

    anyio.run(main)
