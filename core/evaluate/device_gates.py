"""Which job holds each device of the pool.

A candidate job asks for any device and gets the first one free: jobs queue for the pool, not for one device, so
no device idles while another has a queue (a queue fixed at submit time did, behind a long job). A baseline timing
asks for one device, the GPU its process was started on. Waiters are served highest priority first, then in
arrival order; a waiter for one device lets others that can use another free device pass it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import anyio


@dataclass(eq=False)
class _Waiter:
    key: tuple[int, int]
    wanted: int | None
    granted: anyio.Event = field(default_factory=anyio.Event)
    device: int | None = None


class DeviceGates:
    def __init__(self, count: int) -> None:
        self._free = list(range(count))
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()

    async def acquire(self, priority: int = 0, wanted: int | None = None) -> int:
        """Wait for a device (``wanted``, or any) and return its index; the caller must ``release`` it."""
        waiter = _Waiter((-priority, next(self._order)), wanted)
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
        self._free.append(device)
        self._hand_out()

    def load(self, device: int) -> int:
        """Jobs holding ``device`` or waiting for it alone."""
        return (device not in self._free) + sum(w.wanted == device for w in self._waiting)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _hand_out(self) -> None:
        for waiter in sorted(self._waiting, key=lambda w: w.key):
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
