"""Device memory is a budget, not a race: what each piece of GPU work of the pool is expected to take, and its
admission on a device only while the reservations there stay within ``[gpus] memory_budget`` of the device.

Shares. A workload's expected memory comes from its declared inputs and outputs (``analytic_io_bytes``), times what
the work keeps of them, times ``WORKING_FACTOR`` for what the reference or the compiled code makes on the way, plus
``WORKING_FLOOR_BYTES``:

- a candidate job (``job_ask``, its largest workload): the judge's reference outputs of every round, one round's
  inputs, the candidate's inputs of every round and its timing buffers; at least ``JOB_FLOOR`` of the device's
  budget, so a candidate's own workspace has room whatever T_b are in flight beside it;
- a T_b measurement (``baseline_bytes``): its input sets and the eager output, as the pool already counts them.

Admission (``MemoryLedger``): a device's reservations never sum to more than its capacity (the budget less every
worker's CUDA context); work that does not fit waits, in arrival order, for others to release theirs. Work asking
more than the whole capacity is admitted alone. Nothing waits for memory while holding a device (``hold_device``):
a T_b measurement that holds memory while it waits for the device cannot deadlock with the device's holder.

Caps (``core.evaluate.memory_cap``): each worker process runs under a cap set in it: the budget for the judge and
the candidate processes (one job at a time holds a device), narrowed for a T_b measured beside candidate jobs to
that measurement's share, so it cannot take the memory reserved for the job. PyTorch's and cupy's allocators honour
a cap; a candidate's raw ``cudaMalloc`` does not, so for candidates the cap is best effort and the job's share is
what the accounting reserves.

Whose out-of-memory it is. The line is the process. The judge process never runs candidate code: an out-of-memory
there (making the reference, or comparing outputs whose files hold no more than the outputs the problem declares)
is ours, marked ``ReasonCode.OUR_OUT_OF_MEMORY`` and never a verdict on the candidate. A T_b process is ours too.
Ours is tried again when memory is free (``OomRetry``): a job's reference or check once the device's other
reservations end (``wait_alone``: the job lends the device meanwhile to the T_b steps holding them), a T_b in the
judge once nothing else holds the device's memory. The candidate's process is the candidate's: its code shares the
process, what it keeps across calls cannot be told apart from the harness's own tensors (a raw ``cudaMalloc`` is
invisible to PyTorch), and its job's share was reserved before it started, so an out-of-memory there stays the
candidate's failure.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio

from core.evaluate.device_gates import DeviceGates

DEFAULT_BUDGET = 0.9  # of each device's memory, for the pool's work ([gpus] memory_budget)
# Every worker process holds a CUDA context (and cuBLAS's and the kernels' images) outside any allocator's cap.
CONTEXT_BYTES = 1 << 30
WORKING_FACTOR = 2
WORKING_FLOOR_BYTES = 2 << 30  # room for torch.compile of a reference, the timing's L2 flush, the machine probe
JOB_FLOOR = 0.25
# A T_b measurement's floor: a reference's intermediates can dwarf its inputs and outputs (an attention's score
# matrix); measured on an H100, the default run's GQA prefill T_b ran out of memory twice under its analytic share,
# and the retries alone on the device stalled every other preparation for 70 s. Four measurements beside a job fit.
BASELINE_FLOOR = 0.15
JOB_KEPT_BUFFERS = 3  # beyond a copy per round: one round's inputs at the judge, the timing's staged buffers


@dataclass(frozen=True)
class OomRetry:
    """How an out-of-memory of ours is tried again: once after each of ``waits_s`` (each a backoff, during which
    the pool waits for other holders of the device's memory to finish)."""

    waits_s: tuple[float, ...] = (2.0, 10.0, 30.0)

    @property
    def tries(self) -> int:
        return len(self.waits_s)


# ---------------------------------------------------------------- shares


def capacity_bytes(total_bytes: int, budget: float, processes: int) -> int:
    """What a device's reservations may sum to: ``budget`` of its memory less the CUDA contexts of ``processes``."""
    return max(0, int(total_bytes * budget) - processes * CONTEXT_BYTES)


def baseline_bytes(read: int, written: int, input_sets: int) -> int:
    """The share of one T_b measurement: its input sets and the eager output (``(read + written) * (sets + 1)``,
    the pool's own count), with room for the reference's and the compiled code's intermediates."""
    return WORKING_FACTOR * (read + written) * (input_sets + 1) + WORKING_FLOOR_BYTES


def job_bytes(read: int, written: int, rounds: int) -> int:
    """The expected memory of a candidate job on a workload of ``read`` input and ``written`` output bytes:
    a copy of both per round (the judge's reference outputs, the candidate's inputs kept for timing) and
    ``JOB_KEPT_BUFFERS`` more, with room for intermediates."""
    return WORKING_FACTOR * (rounds + JOB_KEPT_BUFFERS) * (read + written) + WORKING_FLOOR_BYTES


@dataclass(frozen=True)
class MemoryAsk:
    """What a piece of work asks of a device's memory: ``nbytes``, at least ``floor`` of the device's capacity,
    at most all of it."""

    nbytes: int
    floor: float = 0.0

    def bytes_for(self, capacity: int) -> int:
        return min(capacity, max(self.nbytes, int(self.floor * capacity)))


ALONE = MemoryAsk(0, floor=1.0)  # the whole capacity: admitted once nothing else is reserved


def job_ask(largest_read: int, largest_written: int, rounds: int) -> MemoryAsk:
    return MemoryAsk(job_bytes(largest_read, largest_written, rounds), JOB_FLOOR)


def admits(others: int, asked: int, capacity: int) -> bool:
    """Whether ``asked`` bytes fit beside ``others`` reserved: within ``capacity``, or alone whatever its size (work
    larger than the budget still runs, with the device to itself)."""
    return others == 0 or others + asked <= capacity


# ---------------------------------------------------------------- admission


@dataclass(frozen=True)
class Reservation:
    ticket: int


@dataclass(eq=False)
class _Ask:
    nbytes: int
    growing: Reservation | None  # an existing reservation asking to grow to ``nbytes``
    granted: anyio.Event = field(default_factory=anyio.Event)
    reservation: Reservation | None = None


class MemoryLedger:
    """One device's reservations. ``try_reserve`` admits at once or not at all; ``reserve`` waits. Asks are served
    in arrival order, and none is admitted past one that waits, so a large ask is not starved by small ones."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)  # never 0: an ask clipped to 0 bytes would always be admitted
        self._held: dict[int, int] = {}
        self._waiting: list[_Ask] = []
        self._tickets = itertools.count()

    @property
    def reserved(self) -> int:
        return sum(self._held.values())

    def size(self, reservation: Reservation) -> int:
        return self._held.get(reservation.ticket, 0)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def try_reserve(self, nbytes: int) -> Reservation | None:
        if self._waiting or not admits(self.reserved, nbytes, self.capacity):
            return None
        return self._hold(nbytes)

    async def reserve(self, nbytes: int) -> Reservation:
        return await self._wait(_Ask(nbytes, None))

    async def grow_alone(self, reservation: Reservation) -> None:
        """Wait until ``reservation`` is the only one, then make it the whole capacity (work that ran out of memory
        beside others, before it tries again)."""
        await self._wait(_Ask(self.capacity, reservation))

    def release(self, reservation: Reservation | None) -> None:
        if reservation is not None and self._held.pop(reservation.ticket, None) is not None:
            self._admit_waiting()

    async def _wait(self, ask: _Ask) -> Reservation:
        self._waiting.append(ask)
        self._admit_waiting()
        try:
            await ask.granted.wait()
        except BaseException:
            if ask.reservation is None:
                self._waiting.remove(ask)
                self._admit_waiting()
            elif ask.growing is None:
                self.release(ask.reservation)
            raise
        assert ask.reservation is not None
        return ask.reservation

    def _hold(self, nbytes: int) -> Reservation:
        reservation = Reservation(next(self._tickets))
        self._held[reservation.ticket] = nbytes
        return reservation

    def _admit_waiting(self) -> None:
        while self._waiting:
            ask = self._waiting[0]
            own = self.size(ask.growing) if ask.growing is not None else 0
            if not admits(self.reserved - own, ask.nbytes, self.capacity):
                return
            self._waiting.pop(0)
            if ask.growing is not None:
                self._held[ask.growing.ticket] = ask.nbytes
                ask.reservation = ask.growing
            else:
                ask.reservation = self._hold(ask.nbytes)
            ask.granted.set()


class OnDemand:
    """A reservation taken at the first ``take`` (after a cache lookup that needed no memory, say) and released on
    leaving the ``async with``. ``ledger`` None: nothing is reserved."""

    def __init__(self, ledger: MemoryLedger | None, nbytes: int):
        self.ledger, self.nbytes = ledger, nbytes
        self.reservation: Reservation | None = None

    async def take(self) -> None:
        if self.ledger is not None and self.reservation is None:
            self.reservation = await self.ledger.reserve(min(self.nbytes, self.ledger.capacity))

    async def __aenter__(self) -> OnDemand:
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self.ledger is not None:
            self.ledger.release(self.reservation)
        self.reservation = None


async def hold_device(gates: DeviceGates, ledgers: Sequence[MemoryLedger | None], ask: MemoryAsk | None,
                      priority: int, wanted: int | None = None, *,
                      may_borrow: bool = False) -> tuple[int, Reservation | None]:
    """A device from ``gates`` (``wanted``, or the first free) and ``ask``'s room on it: ``(device, reservation)``;
    the caller releases both. The room is taken at once when the device's ledger has it; else the device goes back
    and the room is waited for holding no device, then that device again."""
    index = await gates.acquire(priority, wanted, may_borrow=may_borrow)
    ledger = ledgers[index]
    if ledger is None or ask is None:
        return index, None
    nbytes = ask.bytes_for(ledger.capacity)
    reservation = ledger.try_reserve(nbytes)
    if reservation is not None:
        return index, reservation
    gates.release(index)
    reservation = await ledger.reserve(nbytes)
    try:
        return await gates.acquire(priority, index, may_borrow=may_borrow), reservation
    except BaseException:
        ledger.release(reservation)
        raise


async def wait_alone(ledger: MemoryLedger, reservation: Reservation, lend: Callable[[], Awaitable[None]],
                     within_s: float, poll_s: float = 0.5) -> bool:
    """Wait up to ``within_s`` for ``reservation`` to be the device's only one (then it is the whole capacity),
    calling ``lend`` every ``poll_s`` meanwhile: the caller holds the device, which the other holders may need to
    finish (a T_b's timing). Whether it came to be alone. Alone from the start, it waits ``within_s`` all the same:
    what holds the memory then is outside the ledger (another program, a candidate's raw allocations)."""
    alone_already = ledger.reserved == ledger.size(reservation) and not ledger.waiting
    alone = False
    with anyio.move_on_after(within_s):
        async with anyio.create_task_group() as tasks:
            async def grow() -> None:
                nonlocal alone
                await ledger.grow_alone(reservation)
                alone = True
                tasks.cancel_scope.cancel()

            tasks.start_soon(grow)
            while True:
                await lend()
                await anyio.sleep(poll_s)
    if alone and alone_already:
        await anyio.sleep(within_s)
    return alone


def job_memory(problem, indices: Sequence[int] | None, rounds: int) -> MemoryAsk:
    """The ask of a candidate job (or an instrument run) of ``rounds`` on the workloads ``indices`` (None: all) of
    ``problem``, sized by the largest; the floor alone where there is no problem or its shapes cannot be counted."""
    from core.roofline.counting import analytic_io_bytes

    if problem is None:
        return MemoryAsk(0, JOB_FLOOR)
    chosen = range(len(problem.workloads)) if indices is None else indices
    try:
        read, written = max((analytic_io_bytes(problem, problem.workloads[i]) for i in chosen), key=sum,
                            default=(0, 0))
    except (KeyError, ValueError, TypeError, IndexError):
        return MemoryAsk(0, JOB_FLOOR)
    return job_ask(read, written, rounds)
