"""What one turn sends the model, and how many tokens that is by the server's own count.

A request is the tool schemas and the messages: the head first (the system prompt, protocol and tool guide, the
same for the whole run; then the problem's brief, byte-identical for the turn), so that providers' prompt caching
applies to it; then, once steps were dropped, one user message recording them; then the latest exchanges (a model
answer with the tool results and user messages after it).

:class:`TokenMeter` counts a request. After each answer the server's ``prompt_tokens`` for the request just sent is
kept with that request; the next request, which extends it, counts as that exact figure plus an estimate of what was
appended (its characters at the ratio of the last counted request, ESTIMATE_MARGIN high). A request that does not
extend the counted one is estimated whole at that ratio; before the server has counted anything (or for a server
that reports no usage), at DEFAULT_CHARS_PER_TOKEN.

:meth:`History.fit` keeps a request within a budget (the window less the answer's ``max_tokens``). Once the count
passes it: old whole-file writes that a later write of the same file replaced lose their content; then the oldest
exchanges are dropped, each leaving one line in the record (what the step did, and what each attempt it evaluated
measured), until the request is at most REFILL of the budget, so that the next requests extend a stable prefix
again; a latest exchange too large on its own is cut. The record keeps a line for every evaluated attempt; past
MAX_RECORD_CHARS its oldest steps shrink to their attempts' lines alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.llm.brief import workload_times
from core.llm.toolkit import ToolResult, clip
from core.store.model import AttemptRow

DEFAULT_CHARS_PER_TOKEN = 3.0  # before the server has counted a request (code runs at ~2.9, prose at ~4)
ESTIMATE_MARGIN = 1.25  # what the server has not counted yet is estimated this much high
# A calibrated ratio is held within these (a server's odd usage figures must not make estimates of new text tiny).
CHARS_PER_TOKEN_RANGE = (1.0, 6.0)
REFILL = 0.75  # a trimmed request is at most this share of the budget
MAX_RECORD_CHARS = 6000  # the record's size before its oldest steps shrink to their attempts' lines
MAX_LINE_CHARS = 400  # one step's line in the record
SUPERSEDED_MIN_CHARS = 1000  # a superseded write's content shorter than this stays
LAST_RESORT_CHARS = 4000  # a latest exchange over the budget on its own keeps this much of each part
TRIM_NOTE = "(earlier turns were dropped to fit the context)"
RECORD_INTRO = "What those steps of this turn did, oldest first (every attempt you evaluated is listed):"

Message = dict[str, Any]


def request_parts(messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> tuple[str, ...]:
    """A request as JSON text, in the order the server reads it: the tool schemas (one part), then each message."""
    return (json.dumps(list(tools or ())), *(json.dumps(m) for m in messages))


@dataclass(frozen=True)
class TokenMeter:
    """The tokens of a request by the server's count: exact for the part it counted, estimated for the rest."""

    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    counted: tuple[str, ...] = ()  # the parts of the last request the server counted
    counted_tokens: int = 0

    def count(self, parts: Sequence[str]) -> int:
        known = len(self.counted)
        if known and len(parts) >= known and tuple(parts[:known]) == self.counted:
            return self.counted_tokens + self.estimate(parts[known:])
        return self.estimate(parts)

    def estimate(self, parts: Sequence[str]) -> int:
        chars = sum(len(p) for p in parts)
        return math.ceil(chars / self.chars_per_token * ESTIMATE_MARGIN) if chars else 0

    def observe(self, parts: Sequence[str], prompt_tokens: int) -> TokenMeter:
        """The meter once the server counted ``prompt_tokens`` for the request ``parts``."""
        chars = sum(len(p) for p in parts)
        if prompt_tokens <= 0 or not chars:
            return self
        low, high = CHARS_PER_TOKEN_RANGE
        return TokenMeter(min(high, max(low, chars / prompt_tokens)), tuple(parts), prompt_tokens)


# ---------------------------------------------------------------- the record of dropped steps


@dataclass(frozen=True)
class StepRecord:
    """One model answer in one line, kept once its messages are dropped; ``attempts``: a short line per attempt it
    evaluated, which the record keeps whatever its size."""

    step: int
    text: str
    attempts: tuple[str, ...] = ()

    def line(self) -> str:
        """Its line, and a line more for each attempt that cutting it to MAX_LINE_CHARS lost."""
        whole = _one_line(f"- step {self.step}: {self.text}", MAX_LINE_CHARS)
        lost = [_one_line(f"- step {self.step}: {a}", MAX_LINE_CHARS) for a in self.attempts if a not in whole]
        return "\n".join([whole, *lost])


def attempt_summary(attempt: AttemptRow) -> str:
    """An attempt's result in a few words: status, geomean time, speedup and SOL, or why it failed."""
    head = f"attempt {attempt.id}" + (f" ({attempt.language})" if attempt.language else "")
    if not attempt.passed:
        reason = " ".join((attempt.reason or "").split())
        return f"{head}: {attempt.status or attempt.state}" + (f": {_one_line(reason, 120)}" if reason else "")
    figures = [str(attempt.status)]
    times = workload_times(attempt)
    if times:
        geomean = math.exp(sum(math.log(t) for t in times.values()) / len(times))
        figures.append(f"{geomean:.4g} ms geomean")
    if attempt.speedup is not None:
        figures.append(f"{attempt.speedup:.3g}x over T_b")
    if attempt.sol is not None:
        figures.append(f"SOL {attempt.sol:.3g}")
    if not attempt.full:
        figures.append("partial: workloads " + ", ".join(map(str, attempt.workloads or sorted(times))))
    return f"{head}: " + ", ".join(figures)


def action_line(name: str, args: dict[str, Any], result: ToolResult | None = None) -> str:
    """One tool call (or text reply's action) as the record keeps it: its arguments, long ones by their size, and
    what came of it."""
    shown = ", ".join(f"{k}=<{len(v)} chars>" if isinstance(v, str) and len(v) > 40 else
                      f"{k}={' '.join(str(v).split())}" for k, v in args.items())
    line = f"{name}({_one_line(shown, 120)})"
    if result is None:
        return line
    if result.attempt is not None:
        return f"{line} -> {attempt_summary(result.attempt)}"
    if result.equal_to is not None:
        return f"{line} -> equals attempt {result.equal_to.id}, not evaluated again"
    if result.failure:
        return f"{line} -> failed: {_one_line(' '.join(result.failure.split()), 120)}"
    return line


def step_record(step: int, intent: str, actions: Sequence[str], attempts: Sequence[AttemptRow] = ()) -> StepRecord:
    """The record of one answer: the first line of what the model said, then its actions."""
    said = next((line.strip() for line in intent.splitlines() if line.strip()), "")
    text = (f'"{_one_line(said, 100)}" ' if said else "") + ("; ".join(actions) or "(no action)")
    return StepRecord(step, text, tuple(attempt_summary(a) for a in attempts))


def render_record(records: Sequence[StepRecord], carried: Sequence[str] = (), limit: int = MAX_RECORD_CHARS) -> str:
    """The record message: TRIM_NOTE, then a line per dropped step (``carried``: lines of an earlier record). Past
    ``limit`` the oldest steps shrink to their attempts' lines (those that evaluated nothing to one count line), as
    few as it takes; every attempt keeps its line."""
    if not records and not carried:
        return TRIM_NOTE
    head = [TRIM_NOTE, RECORD_INTRO, *carried]
    full = [r.line() for r in records]
    sizes = [len(line) + 1 for line in full]
    size = sum(len(line) + 1 for line in head) + sum(sizes)
    shrunk: list[str] = []
    quiet: list[int] = []
    cut = 0
    while size > limit and cut < len(records):
        record = records[cut]
        size -= sizes[cut]
        attempt_lines = [_one_line(f"- step {record.step}: {a}", MAX_LINE_CHARS) for a in record.attempts]
        shrunk += attempt_lines
        size += sum(len(line) + 1 for line in attempt_lines)
        if not record.attempts:
            quiet.append(record.step)
        cut += 1
    summary = [f"- {len(quiet)} steps up to step {quiet[-1]} that evaluated nothing (reads, writes, builds) are not "
               "listed"] if quiet else []
    return "\n".join(head + summary + shrunk + full[cut:])


# ---------------------------------------------------------------- the history of a turn


@dataclass
class Exchange:
    """A model answer and the messages after it, up to the next answer; dropped whole, so no tool result loses its
    call."""

    messages: list[Message]
    record: StepRecord | None = None


@dataclass
class History:
    """The messages of one turn: ``head`` (system prompt and brief), the record of dropped steps, the exchanges."""

    head: list[Message]
    exchanges: list[Exchange] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)
    carried: tuple[str, ...] = ()  # the lines of a record this history was rebuilt from (``of``)
    dropped: int = 0  # exchanges dropped so far
    steps: int = 0  # answers so far

    @classmethod
    def of(cls, messages: Sequence[Message], keep_head: int = 2) -> History:
        """A history rebuilt from a message list (a record message after the head is recognised and carried)."""
        history = cls(list(messages[:keep_head]))
        rest = list(messages[keep_head:])
        if rest and rest[0].get("role") == "user" and str(rest[0].get("content", "")).startswith(TRIM_NOTE):
            lines = str(rest.pop(0)["content"]).split("\n")[1:]
            history.carried = tuple(line for line in lines if line != RECORD_INTRO)
            history.dropped = 1
        for message in rest:
            if message.get("role") == "assistant" or not history.exchanges:
                history.exchanges.append(Exchange([message]))
            else:
                history.exchanges[-1].messages.append(message)
        return history

    def answer(self, message: Message) -> int:
        """Start the exchange of a model answer; its step number (1-based)."""
        self.steps += 1
        self.exchanges.append(Exchange([message]))
        return self.steps

    def add(self, message: Message) -> None:
        """A tool result or a user message, after the latest answer."""
        if not self.exchanges:
            self.exchanges.append(Exchange([]))
        self.exchanges[-1].messages.append(message)

    def note(self, record: StepRecord) -> None:
        """What the latest answer did, for the record once it is dropped."""
        if self.exchanges:
            self.exchanges[-1].record = record

    def messages(self) -> list[Message]:
        record = [{"role": "user", "content": render_record(self.records, self.carried)}] if self.dropped else []
        return self.head + record + [m for e in self.exchanges for m in e.messages]

    def count(self, meter: TokenMeter, tools: Sequence[dict[str, Any]] | None) -> int:
        return meter.count(request_parts(self.messages(), tools))

    def fit(self, meter: TokenMeter, tools: Sequence[dict[str, Any]] | None, budget: int) -> bool:
        """Bring the request within ``budget`` tokens as the module docstring says; whether anything changed."""
        if self.count(meter, tools) <= budget:
            return False
        target = int(budget * REFILL)
        self._drop_superseded_contents()
        while len(self.exchanges) > 1 and self.count(meter, tools) > target:
            exchange = self.exchanges.pop(0)
            self.dropped += 1
            if exchange.record is not None:
                self.records.append(exchange.record)
        if self.exchanges and self.count(meter, tools) > budget:
            self.exchanges[-1].messages = [_cut(m) for m in self.exchanges[-1].messages]
        return True

    def _drop_superseded_contents(self) -> None:
        """Empty the content of each write_file call that a later write_file of the same path replaced."""
        written_later: set[str] = set()
        for exchange in reversed(self.exchanges):
            for j in reversed(range(len(exchange.messages))):
                calls = exchange.messages[j].get("tool_calls")
                if calls:
                    kept = [_superseded(call, written_later) for call in reversed(calls)][::-1]
                    if any(a is not b for a, b in zip(kept, calls)):
                        exchange.messages[j] = {**exchange.messages[j], "tool_calls": kept}


def trim_history(messages: list[Message], budget_tokens: int, keep_head: int = 2,
                 meter: TokenMeter | None = None, tools: Sequence[dict[str, Any]] | None = None) -> list[Message]:
    """``History.fit`` on a plain message list: the first ``keep_head`` messages kept, old exchanges dropped."""
    history = History.of(messages, keep_head)
    history.fit(meter or TokenMeter(), tools, budget_tokens)
    return history.messages()


def _one_line(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _superseded(call: dict[str, Any], written_later: set[str]) -> dict[str, Any]:
    """``call`` with its content omitted if it is a write_file of a path in ``written_later`` (which gets its path:
    calls are seen latest first)."""
    function = call.get("function") or {}
    if function.get("name") != "write_file":
        return call
    args = _json_object(function.get("arguments", ""))
    path, content = args.get("path"), args.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        return call
    if path not in written_later:
        written_later.add(path)
        return call
    if len(content) < SUPERSEDED_MIN_CHARS:
        return call
    omitted = {"path": path, "content_omitted": f"{len(content)} characters, replaced by a later write_file of {path}"}
    return {**call, "function": {**function, "arguments": json.dumps(omitted)}}


def _cut(message: Message) -> Message:
    """A message of a latest exchange too large on its own: long contents and arguments cut to LAST_RESORT_CHARS."""
    cut = dict(message)
    content = cut.get("content")
    if isinstance(content, str) and len(content) > LAST_RESORT_CHARS:
        cut["content"] = clip(content, LAST_RESORT_CHARS) + " (cut from the history to fit the context)"
    if cut.get("tool_calls"):
        cut["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": json.dumps(
                {"omitted": f"{len(c['function'].get('arguments') or '')} characters of arguments, cut from the "
                            "history to fit the context"})}}
            if len(c.get("function", {}).get("arguments") or "") > LAST_RESORT_CHARS else c
            for c in cut["tool_calls"]]
    return cut
