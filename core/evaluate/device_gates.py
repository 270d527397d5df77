"""Which job holds each device of the pool.

A candidate job asks for any device and gets the first one free: jobs queue for the pool, not for one device, so
no device idles while another has a queue (a queue fixed at submit time did, behind a long job). A baseline timing
asks for one device, the GPU its process was started on. Waiters are served highest priority first, then in
arrival order; a waiter for one device lets others that can use another free device pass it.

A waiter's wait is bounded (``bounded_wait_s``): one that has waited that long goes before every fresher waiter,
whatever their priorities, oldest first. Preparation's T_b steps outrank candidates, and at the start of a run over
hundreds of problems they queue without pause: measured on an H100 over SOL-ExecBench, the first agent candidate
waited 74 s behind them.

A candidate job between two workloads lends its device (``lend``) to waiters of a higher priority that may borrow
(T_b's short steps in a baseline process of their own, which leave the candidate and judge processes alone): such a
step then waits for one workload of a candidate, not for all of it, and the candidate gets the device back before
anyone else."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import anyio


# How long a waiter may wait before it goes first: a T_b step or a candidate's workload takes seconds, so a candidate
# asked for while preparation is busy is evaluated within about this long.
BOUNDED_WAIT_S = 30.0


@dataclass(eq=False)
class _Waiter:
    key: tuple[int, int]
    wanted: int | None
    may_borrow: bool  # short work that uses neither the candidate process nor the judge
    since: float  # time.monotonic() when it began to wait
    granted: anyio.Event = field(default_factory=anyio.Event)
    device: int | None = None


class DeviceGates:
    def __init__(self, count: int, bounded_wait_s: float = BOUNDED_WAIT_S) -> None:
        self._free = list(range(count))
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()
        self._lent: dict[int, anyio.Event] = {}  # device -> set when its borrower releases it
        self.bounded_wait_s = bounded_wait_s

    async def acquire(self, priority: int = 0, wanted: int | None = None, *, may_borrow: bool = False) -> int:
        """Wait for a device (``wanted``, or any) and return its index; the caller must ``release`` it.
        ``may_borrow``: the work may be lent the device by a candidate job between its workloads (see ``lend``)."""
        waiter = _Waiter((-priority, next(self._order)), wanted, may_borrow, time.monotonic())
        self._waiting.append(waiter)
        self._hand_out()
        try:
            await waiter.granted.wait()
        except BaseException:
            if waiter.device is None:
                self._waiting.remove(waiter)
            else:
                self.release(waiter.device)
            raise
        assert waiter.device is not None
        return waiter.device

    def release(self, device: int) -> None:
        returned = self._lent.pop(device, None)
        if returned is not None:  # a borrower's release: the device goes back to the job that lent it
            returned.set()
            return
        self._free.append(device)
        self._hand_out()

    async def lend(self, device: int, priority: int) -> float:
        """Called by the holder of ``device`` (a job of ``priority``): hand the device to each waiter of a higher
        priority that may borrow it, one after another for at most ``bounded_wait_s``, and return once it is back;
        the seconds it was lent. The
        wait is shielded from cancellation: the device is the borrower's until it releases it."""
        began = None
        while True:
            if began is not None and time.monotonic() - began >= self.bounded_wait_s:
                return time.monotonic() - began  # the lender's wait is bounded too: borrowers keep coming
            borrower = next((w for w in sorted(self._waiting, key=lambda w: w.key) if w.may_borrow
                             and -w.key[0] > priority and w.wanted in (None, device)), None)
            if borrower is None:
                return 0.0 if began is None else time.monotonic() - began
            began = began if began is not None else time.monotonic()
            returned = self._lent[device] = anyio.Event()
            self._waiting.remove(borrower)
            borrower.device = device
            borrower.granted.set()
            with anyio.CancelScope(shield=True):
                await returned.wait()

    def load(self, device: int) -> int:
        """Jobs holding ``device`` or waiting for it alone."""
        return (device not in self._free) + sum(w.wanted == device for w in self._waiting)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _turn(self) -> list[_Waiter]:
        """The waiters in the order they are served: those that waited ``bounded_wait_s`` first, oldest first; then
        by priority, then arrival."""
        overdue = time.monotonic() - self.bounded_wait_s
        return sorted(self._waiting, key=lambda w: (0, w.key[1]) if w.since <= overdue else (1, *w.key))

    def _hand_out(self) -> None:
        for waiter in self._turn():
            if not self._free:
                return
            if waiter.wanted is None:
                device = min(self._free)
            elif waiter.wanted in self._free:
                device = waiter.wanted
            else:
                continue
            self._free.remove(device)
            self._waiting.remove(waiter)
            waiter.device = device
            waiter.granted.set()
