"""How a timing was taken, as a value other modules can ask (``host_bound``, ``clock``) rather than a sentence they
search; ``describe()`` renders the sentence shown to people and kept in stores. Pure data, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CUDA_EVENTS = "cuda-events"
CUPTI_SPAN = "cupti-span"
DEVICE_SYNC = "device-sync"  # cuda events around a device-wide synchronisation (work seen on other streams)
WALL = "wall"
CLOCKS = (CUDA_EVENTS, CUPTI_SPAN, DEVICE_SYNC, WALL)

EVENTS_METHOD = "cuda events per call, L2 flushed, device-wide check"
SPAN_METHOD = "CUPTI kernel span per call, L2 flushed, device-wide check"
WALL_METHOD = "wall clock per call (cpu)"
HOST_BOUND_NOTE = "; host-bound: the calls kept the GPU waiting for the host"
SPANS_HIDDEN_NOTE = ("; cuda events: with the GPU waiting on a spin, the calls' kernel spans fell short of their "
                     "events (GPU work hidden from CUPTI)")
SPANS_UNCHECKED_NOTE = ("; cuda events: the kernel spans could not be checked against the events (no call launched "
                        "within a lead of {cap:g} ms)")


@dataclass(frozen=True)
class TimingMethod:
    """``clock``: what each call was timed by (one of CLOCKS). ``host_bound``: too few calls were led by enough GPU
    work to hide their launch, so all count with their host time in. ``notes``: qualifying clauses of a traced
    timing (calls timed by events among spans). ``spans_dropped``: why spans were asked for and not used (one of
    "", "hidden", "unchecked"), with ``lead_cap_ms``, the longest lead a call was looked for in. ``waits_us``: for
    DEVICE_SYNC, the median wait beyond an idle synchronisation in each pass."""

    clock: str
    host_bound: bool = False
    notes: tuple[str, ...] = ()
    spans_dropped: str = ""
    lead_cap_ms: float | None = None
    waits_us: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.clock == WALL:
            return WALL_METHOD
        if self.clock == DEVICE_SYNC:
            return ("cuda events around a device-wide synchronisation, no lead (work seen outside the current stream: "
                    f"its median wait beyond an idle one was {' and '.join(self.waits_us)} us in "
                    f"{len(self.waits_us)} passes)")
        text = SPAN_METHOD if self.clock == CUPTI_SPAN else EVENTS_METHOD
        text += "".join(f"; {note}" for note in self.notes)
        if self.host_bound:
            text += HOST_BOUND_NOTE
        if self.spans_dropped == "hidden":
            text += SPANS_HIDDEN_NOTE
        elif self.spans_dropped == "unchecked":
            text += SPANS_UNCHECKED_NOTE.format(cap=self.lead_cap_ms or 0.0)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"clock": self.clock, "host_bound": self.host_bound, "notes": list(self.notes),
                "spans_dropped": self.spans_dropped, "lead_cap_ms": self.lead_cap_ms, "waits_us": list(self.waits_us)}

    @classmethod
    def from_dict(cls, data: Any) -> TimingMethod | None:
        """The inverse of ``to_dict``; None for anything that is not one (a worker's answer is untrusted)."""
        if not isinstance(data, dict) or data.get("clock") not in CLOCKS:
            return None
        try:
            cap = data.get("lead_cap_ms")
            return cls(str(data["clock"]), data.get("host_bound") is True,
                       tuple(str(n) for n in data.get("notes") or ()), str(data.get("spans_dropped") or ""),
                       None if cap is None else float(cap), tuple(str(w) for w in data.get("waits_us") or ()))
        except (TypeError, ValueError):
            return None


def host_bound_in(sentence: str) -> bool:
    """Whether a method sentence from before the structured form (an old store row, an old cache entry) says the
    timing was host-bound: the one place that reads the prose."""
    return "host-bound" in sentence
