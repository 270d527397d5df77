"""The reviewer (``[review] enabled = true``): a second, cheaper model that reads a new LLM candidate's diff and a
short summary of its problem before the candidate is evaluated, and answers approve or reject with a reason (JSON).
A reject is recorded as a REJECTED attempt that never reaches a device, and its reason goes back to the agent.

The reviewer fails open: an answer that cannot be read (garbage, oversized, a reject without a reason) or an endpoint
that does not answer approves the candidate, with a log line saying so; only the evaluation decides a verdict. Its
calls are recorded on the problem (not on the agent) and held against the budgets like every model call.

``review_messages`` and ``parse_review`` are pure; ``Reviewer.review`` makes the one call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from core.config.schema import profile_llm
from core.store.model import LlmCall

if TYPE_CHECKING:
    from core.config.schema import FleetConfig, LlmConfig
    from core.evaluate.verdict import Verdict
    from core.fleet.workbench import Workbench
    from core.llm.client import LlmClient
    from core.problem.schema import Problem
    from core.solution.schema import Solution

MARKER = "You review a candidate GPU kernel"
MAX_REFERENCE_CHARS = 3000
MAX_DIFF_CHARS = 12_000
MAX_NOTE_CHARS = 500
MAX_ANSWER_CHARS = 4000
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Review:
    approved: bool
    reason: str
    unusable: str | None = None  # why the answer could not be read (then approved by default)


def reviewer_config(config: FleetConfig) -> LlmConfig:
    """The reviewer's endpoint and model: ``[review] profile``'s, else the [llm] settings; short, sober answers."""
    return replace(profile_llm(config.llm, config.review.profile), max_tokens=config.review.max_tokens,
                   temperature=0.0)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def problem_summary(problem: Problem) -> str:
    d = problem.definition

    def tensors(specs) -> str:
        return ", ".join(f"{name} {spec.dtype} {list(spec.shape) if spec.shape is not None else 'scalar'}"
                         for name, spec in specs.items())

    return (f"Problem {d.name}: {' '.join(d.description.split())[:300]}\nInputs: {tensors(d.inputs)}\n"
            f"Outputs: {tensors(d.outputs)}\nReference (PyTorch):\n```python\n"
            f"{_clip(d.reference, MAX_REFERENCE_CHARS)}\n```")


def review_messages(summary: str, spec: dict[str, Any], diff: str, note: str) -> list[dict[str, Any]]:
    system = (f"{MARKER} before it is evaluated. Reject it only when it certainly cannot be correct or cannot be "
              "faster than its parent: a wrong formula, outputs never written, the reference's work skipped or "
              "cached across calls, an obvious slowdown. When in doubt, approve: the evaluator checks correctness "
              'and speed. Answer with JSON only: {"verdict": "approve" or "reject", "reason": "one sentence"}.')
    shown = {k: spec.get(k) for k in ("languages", "entry_point", "destination_passing_style", "binding")}
    user = (f"{summary}\n\nCandidate spec: {json.dumps(shown)}\nThe agent's note: "
            f"{' '.join(note.split())[:MAX_NOTE_CHARS] or '(none)'}\n\nDiff to its parent (or its sources when it "
            f"has none):\n```diff\n{_clip(diff, MAX_DIFF_CHARS) or '(no change)'}\n```")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def parse_review(content: str) -> Review:
    """The verdict in a reviewer's answer; an unreadable one approves, saying why (pure)."""
    if len(content or "") > MAX_ANSWER_CHARS:
        return Review(True, "", f"oversized answer: {len(content)} characters (limit {MAX_ANSWER_CHARS})")
    text = content or ""
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCED.finditer(text))]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(value, dict):
            continue
        verdict = value.get("verdict", value.get("decision"))
        reason = value.get("reason")
        reason = " ".join(reason.split())[:MAX_REASON_CHARS] if isinstance(reason, str) else ""
        if isinstance(verdict, str) and verdict.strip().lower() in ("approve", "approved", "accept"):
            return Review(True, reason)
        if isinstance(verdict, str) and verdict.strip().lower() in ("reject", "rejected"):
            if not reason:
                return Review(True, "", "a reject without a reason")
            return Review(False, reason)
        return Review(True, "", f"no verdict approve or reject: {' '.join(candidate.split())[:120]!r}")
    return Review(True, "", f"no JSON verdict in the answer: {' '.join(text.split())[:120] or '(empty)'!r}")


class Reviewer:
    def __init__(self, cfg: LlmConfig, *, client: LlmClient | None = None):
        self.cfg = cfg
        self._client = client

    @property
    def client(self) -> LlmClient:
        if self._client is None:
            from core.llm.client import LlmClient

            self._client = LlmClient.shared(self.cfg)
        return self._client

    async def review(self, messages: list[dict[str, Any]], *,
                     reserve: Callable[[int, float], AbstractContextManager[None]],
                     record: Callable[[LlmCall], None], log: Callable[[str], None]) -> Review:
        """Approve or reject, with a reason; fails open (see the module docstring). BudgetSpent is not caught: a
        spent budget ends the agent's turn as every model call's does."""
        from core.llm.client import LlmUnavailable, cost, estimate_tokens

        prompt, completion = estimate_tokens(messages), self.cfg.max_tokens
        with reserve(prompt + completion, cost(self.cfg, prompt, completion)):
            try:
                reply = await self.client.chat(messages, on_retry=log, on_call=record)
            except LlmUnavailable as exc:
                log(f"review unavailable, approved by default: {exc}")
                return Review(True, "", f"unavailable: {exc}")
            verdict = parse_review(reply.content)
            record(replace(reply.call, outcome="garbage" if verdict.unusable else reply.call.outcome,
                           detail=f"review: {verdict.unusable or ('approve' if verdict.approved else 'reject')}"
                           [:200]))
        if verdict.unusable:
            log(f"review unreadable, approved by default: {verdict.unusable}")
        return verdict


class ReviewGate:
    """The LLM kind's review gate (``core.fleet.agent.ReviewGate``): the reviewer's REJECTED verdict for a candidate,
    or None when it approves (or fails: it fails open). The reviewer is made on first use."""

    def __init__(self, config: FleetConfig):
        self.config = config
        self._reviewer: Reviewer | None = None

    @property
    def reviewer(self) -> Reviewer:
        if self._reviewer is None:
            self._reviewer = Reviewer(reviewer_config(self.config))
        return self._reviewer

    async def __call__(self, bench: Workbench, solution: Solution, diff: str, note: str,
                       workloads: tuple[int, ...] | None) -> Verdict | None:
        from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
        from core.solution.io import solution_to_dict

        reviewer = self.reviewer
        shown = diff or "\n".join(f"--- {s.path}\n{s.content}" for s in solution.sources)
        messages = review_messages(problem_summary(bench.problem), solution_to_dict(solution)["spec"], shown, note)
        review = await reviewer.review(
            messages, reserve=bench.reserve_call,
            record=lambda call: bench.store.add_llm_call(None, bench.problem_id, call,
                                                         profile=self.config.review.profile,
                                                         model=reviewer.cfg.model), log=bench.log)
        if review.approved:
            return None
        reason = f"review: {review.reason}"
        bench.log(f"candidate rejected by the reviewer before evaluation: {review.reason}")
        return Verdict(Status.REJECTED, reason,
                       tuple(WorkloadVerdict(i, Status.REJECTED, reason) for i in (workloads or (0,))[:1]))


def review_gate(config: FleetConfig) -> ReviewGate | None:
    """The gate for LLM candidates where ``[review] enabled``; none otherwise."""
    return ReviewGate(config) if config.review.enabled else None
