"""The LLM agent: a chat-completions loop over a Workbench, with native tool calls or the text protocol.

One ``work()`` call is one turn on one problem: the model gets ``protocol.md`` and a brief of the problem, edits a
workspace that starts as the current best's sources, builds and evaluates through the tools (each evaluation an
attempt in the store), and ends the turn with ``finish`` (a full evaluation). Every model answer leads to a
recorded attempt, to workspace edits on the way to one, or to a classified failure logged with ``bench.log``:
"garbage answer", "malformed tool call: ...", "no files", "invalid solution: ...", "compile error".

Candidate code never runs here: it only reaches ``bench.build`` and ``bench.evaluate``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio

from core.config.schema import FleetConfig
from core.fleet.agent import WorkOutcome, Workbench
from core.llm.brief import problem_brief, system_prompt
from core.llm.client import LlmClient, LlmReply, LlmUnavailable, ToolsRejected, cost, estimate_tokens
from core.llm.tools import TOOL_NAMES, TOOL_SCHEMAS, Toolbox, ToolResult, Workspace, WorkspaceError, \
    parse_text_reply
from core.store.model import AttemptRow

MAX_TOOL_RESULT_CHARS = 8000
NOTES = 8  # recent attempts shown in the brief
TRIM_NOTE = "(earlier turns were dropped to fit the context)"
NUDGE_TOOLS = ("Use the tools: write your files with write_file, check them with evaluate, and call finish with a "
               "short note when you have a candidate.")
NUDGE_TEXT = ("Reply with your candidate's files in fenced blocks named with path=..., e.g. ```python path=main.py, "
              "or a line FINISH: <note> when you have nothing more to try.")


def trim_history(messages: list[dict[str, Any]], budget_tokens: int, keep_head: int = 2) -> list[dict[str, Any]]:
    """Keep the first ``keep_head`` messages (system and brief) and as many of the latest turns as fit in
    ``budget_tokens`` (4 characters a token). A turn (an assistant message and the tool results and user messages
    after it) is dropped whole, so a tool result never loses its call; the latest turn is always kept."""
    head, rest = messages[:keep_head], messages[keep_head:]
    trimmed_before = bool(rest) and rest[0].get("content") == TRIM_NOTE
    if trimmed_before:
        rest = rest[1:]  # a previous trim's note: put back in front below
    groups: list[list[dict[str, Any]]] = []
    for message in rest:
        if message.get("role") == "assistant" or not groups:
            groups.append([message])
        else:
            groups[-1].append(message)
    sizes = [sum(estimate_tokens(m) for m in g) for g in groups]
    total = sum(estimate_tokens(m) for m in head) + sum(sizes)
    dropped = 0
    while total > budget_tokens and len(groups) > 1:
        total -= sizes.pop(0)
        dropped += len(groups.pop(0))
    note = [{"role": "user", "content": TRIM_NOTE}] if dropped or trimmed_before else []
    return head + note + [m for g in groups for m in g]


class LlmAgent:
    kind = "llm"

    def __init__(self, config: FleetConfig, *, client: LlmClient | None = None, max_steps: int = 40,
                 max_failures_in_row: int = 4, cooldown_s: float = 30.0):
        self.config = config
        self.cfg = config.llm
        self._client = client
        self.max_steps = max_steps
        self.max_failures_in_row = max_failures_in_row
        self.cooldown_s = cooldown_s
        # Tokens and dollars spent on a problem since this agent's last attempt there: billed to the next one.
        self._unbilled: dict[int, list] = {}
        self._budget_logged: set[int] = set()

    def can_work_on(self, best: AttemptRow | None) -> bool:
        return True

    @property
    def client(self) -> LlmClient:
        if self._client is None:
            self._client = LlmClient.shared(self.cfg)
        return self._client

    # ---------------------------------------------------------------- the turn

    async def work(self, bench: Workbench) -> WorkOutcome:
        client = self.client
        if not await self._wait_out_cooldown(bench, client):
            return WorkOutcome.STOPPED
        mode = "text" if client.tools_supported is False else "tools"
        best = bench.best()
        workspace = Workspace.from_solution(best.solution if best is not None else None)
        pid = bench.problem_id
        toolbox = Toolbox(bench, workspace, author=bench.agent.name or "llm", charge=lambda: self._charge(pid),
                          parent_id=best.id if best is not None else None)
        messages = self._opening(bench, best, workspace, mode)
        failures = 0
        for _ in range(self.max_steps):
            if bench.should_stop():
                return WorkOutcome.STOPPED
            messages = trim_history(messages, max(1024, self.cfg.context_tokens - self.cfg.max_tokens))
            over = self._over_budget(bench, messages)
            if over:
                if pid not in self._budget_logged:
                    bench.log(f"llm: stopping, {over}")
                    self._budget_logged.add(pid)
                # Nothing to do here until the planner moves this agent; waiting (not returning at once) keeps an
                # agent the planner hands this problem again from spinning through turns.
                await self._wait(bench, time.monotonic() + self.cooldown_s)
                return WorkOutcome.EXHAUSTED
            try:
                reply = await client.chat(messages, tools=TOOL_SCHEMAS if mode == "tools" else None,
                                          on_retry=bench.log)
            except ToolsRejected as exc:
                if self.cfg.tool_calling == "tools":
                    bench.log(f"llm unavailable: the endpoint rejects tool calls ({exc}); tool_calling = \"tools\"")
                    client.unavailable_until = time.monotonic() + self.cooldown_s
                    return WorkOutcome.STOPPED
                client.tools_supported = False
                bench.log(f"llm: the endpoint rejects tool calls ({exc}); using the text protocol")
                mode = "text"
                messages = self._opening(bench, best, workspace, mode)
                continue
            except LlmUnavailable as exc:
                bench.log(f"llm unavailable: {exc}")
                client.unavailable_until = time.monotonic() + self.cooldown_s
                return WorkOutcome.STOPPED
            self._spend(pid, reply)
            messages.append(reply.message)
            progress, finished = await self._handle(bench, toolbox, reply, messages, mode)
            if finished:
                return WorkOutcome.STOPPED
            failures = 0 if progress else failures + 1
            if failures >= self.max_failures_in_row:
                bench.log(f"llm: ending the turn after {failures} failed answers in a row")
                return WorkOutcome.EXHAUSTED
        bench.log(f"llm: ending the turn after {self.max_steps} model calls without finish")
        return WorkOutcome.STOPPED

    def _opening(self, bench: Workbench, best: AttemptRow | None, workspace: Workspace,
                 mode: str) -> list[dict[str, Any]]:
        brief = problem_brief(bench.problem, bench.row(), best, bench.attempts(limit=NOTES),
                              agent_id=bench.agent.id, spec=workspace.spec, files=list(workspace.files),
                              sources=workspace.files)
        task = ("Write a correct candidate that is faster than the current best (or than the reference if there is "
                "none), starting from the workspace above.")
        return [{"role": "system", "content": system_prompt(mode)}, {"role": "user", "content": brief + "\n" + task}]

    async def _wait_out_cooldown(self, bench: Workbench, client: LlmClient) -> bool:
        left = client.unavailable_until - time.monotonic()
        if left <= 0:
            return True
        bench.log(f"llm unavailable: waiting {left:.0f}s before calling the endpoint again")
        return await self._wait(bench, client.unavailable_until)

    @staticmethod
    async def _wait(bench: Workbench, until: float) -> bool:
        """Sleep until the monotonic time ``until``; False as soon as the agent is asked to stop."""
        while time.monotonic() < until:
            if bench.should_stop():
                return False
            await anyio.sleep(min(0.2, max(0.0, until - time.monotonic())))
        return not bench.should_stop()

    # ---------------------------------------------------------------- spending

    def _spend(self, pid: int, reply: LlmReply) -> None:
        spent = self._unbilled.setdefault(pid, [0, 0.0])
        spent[0] += reply.tokens
        spent[1] += reply.dollars

    def _charge(self, pid: int) -> tuple[int, float]:
        tokens, dollars = self._unbilled.pop(pid, (0, 0.0))
        return int(tokens), float(dollars)

    def _over_budget(self, bench: Workbench, messages: list[dict[str, Any]]) -> str | None:
        budgets = self.config.budgets
        if not budgets.problem_tokens and not budgets.problem_dollars:
            return None
        row = bench.row()
        tokens, dollars = self._unbilled.get(bench.problem_id, (0, 0.0))
        prompt, completion = estimate_tokens(messages), self.cfg.max_tokens
        if budgets.problem_tokens and row.tokens + tokens + prompt + completion > budgets.problem_tokens:
            return (f"the next call would pass the problem's token budget ({row.tokens + tokens} spent, "
                    f"about {prompt + completion} more, budget {budgets.problem_tokens})")
        more = cost(self.cfg, prompt, completion)
        if budgets.problem_dollars and row.dollars + dollars + more > budgets.problem_dollars:
            return (f"the next call would pass the problem's dollar budget (${row.dollars + dollars:.4f} spent, "
                    f"about ${more:.4f} more, budget ${budgets.problem_dollars:.4f})")
        return None

    # ---------------------------------------------------------------- answers

    async def _handle(self, bench: Workbench, toolbox: Toolbox, reply: LlmReply, messages: list[dict[str, Any]],
                      mode: str) -> tuple[bool, bool]:
        """Act on one answer; (made progress, turn finished)."""
        if reply.tool_calls:
            return await self._handle_tool_calls(bench, toolbox, reply, messages)
        parsed = parse_text_reply(reply.content)
        nudge = NUDGE_TOOLS if mode == "tools" else NUDGE_TEXT
        if parsed.files:
            try:
                for path, content in parsed.files:
                    toolbox.workspace.write(path, content)
            except WorkspaceError as exc:
                self._failure(bench, f"no files: {exc}", reply)
                messages.append({"role": "user", "content": f"error: {exc}\n{nudge}"})
                return False, False
            result = await toolbox.call("finish" if parsed.finish_note is not None else "evaluate",
                                        {"note": parsed.finish_note or ""} if parsed.finish_note is not None else {})
            if result.failure:
                self._failure(bench, result.failure, reply)
            follow = "" if result.finished else ("\nReply with a fixed or faster version, or FINISH: <note>."
                                                 if mode == "text" else "\n" + NUDGE_TOOLS)
            messages.append({"role": "user", "content": _clip(result.text) + follow})
            return result.attempt is not None, result.finished
        if parsed.finish_note is not None and mode == "text":
            bench.log(f"llm: turn finished: {parsed.finish_note[:200]}" if parsed.finish_note else
                      "llm: turn finished")
            return True, True
        if parsed.blocks:
            self._failure(bench, "no files: code blocks without path=", reply)
            messages.append({"role": "user", "content": "Your reply has code blocks but none names its file. "
                                                        + nudge})
        else:
            cut = " (cut off at max_tokens)" if reply.finish_reason == "length" else ""
            self._failure(bench, f"garbage answer{cut}: {_snippet(reply.content)}", reply)
            messages.append({"role": "user", "content": nudge})
        return False, False

    async def _handle_tool_calls(self, bench: Workbench, toolbox: Toolbox, reply: LlmReply,
                                 messages: list[dict[str, Any]]) -> tuple[bool, bool]:
        progress, finished = False, False
        for call in reply.tool_calls:
            if finished:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "skipped: the turn ended"})
                continue
            args, problem = _arguments(call.arguments)
            if call.name not in TOOL_NAMES:
                problem = f"unknown tool {call.name!r}"
            if problem is not None:
                self._failure(bench, f"malformed tool call: {call.name or '(no name)'}: {problem}", reply)
                result = ToolResult(f"error: {problem}. Call one of: {', '.join(sorted(TOOL_NAMES))}, with JSON "
                                    "object arguments.")
            else:
                result = await toolbox.call(call.name, args)
                if result.failure:
                    self._failure(bench, result.failure, reply)
                else:
                    progress = True
                if result.attempt is not None:
                    progress = True
                finished = result.finished
            messages.append({"role": "tool", "tool_call_id": call.id, "content": _clip(result.text)})
        return progress, finished

    def _failure(self, bench: Workbench, what: str, reply: LlmReply) -> None:
        bench.log(f"{what} ({reply.tokens} tokens)")


def _arguments(text: str) -> tuple[dict[str, Any], str | None]:
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(value, dict):
        return {}, "arguments must be a JSON object"
    return value, None


def _snippet(text: str, limit: int = 120) -> str:
    text = " ".join((text or "").split())
    if not text:
        return "(empty)"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _clip(text: str, limit: int = MAX_TOOL_RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"
