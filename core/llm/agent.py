"""The LLM agent: a chat-completions loop over a Workbench, with native tool calls or the text protocol.

One ``work()`` call is one turn on one problem: the model gets ``protocol.md`` and a brief of the problem, edits a
workspace that starts as the current best's sources, builds and evaluates through the tools (each evaluation an
attempt in the store), and ends the turn with ``finish`` (a full evaluation) or ``FINISH: note``. Every model answer
leads to a recorded attempt, to workspace edits on the way to one, or to a classified failure logged with
``bench.log``: "garbage answer", "oversized answer", "malformed tool call: ...", "no files", "invalid solution: ...",
"compile error".

Every model call is recorded when it returns (``bench.record_call``), its estimated cost held against the budgets
while it is in flight (``bench.reserve_call``). Each request stays within the profile's window (``context_tokens``
less ``max_tokens``) by the server's own token counts, old steps dropped for a record of what they tried and
measured (``core.llm.context``). A turn ends after ``max_steps`` calls, after ``max_failures_in_row`` failed
answers in a row, or after ``no_progress_calls`` calls in a row without a new distinct candidate evaluated; an
endpoint that is down retires the agent for the rest of the run.

Candidate code never runs here: it only reaches ``bench.build`` and ``bench.evaluate``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from core.config.schema import FleetConfig, profile_llm
from core.fleet.agent import WorkOutcome, Workbench
from core.fleet.frontier import StartingChoice
from core.llm import context
from core.llm.brief import problem_brief, system_prompt
from core.llm.client import LlmClient, LlmDown, LlmReply, LlmUnavailable, ToolsRejected, cost
from core.llm.context import History, TokenMeter, action_line, request_parts, step_record
from core.llm.tools import MAX_FILE_CHARS, Toolbox, ToolResult, Workspace, WorkspaceError, parse_text_reply, \
    registry, tool_schemas
from core.store.model import AttemptRow, LlmCall

MAX_TOOL_RESULT_CHARS = 8000
# The tool-call arguments one answer may carry in all: the calls past it are refused, and the history keeps them
# short, so that the answer (always kept whole as the latest turn) cannot make the next request huge.
MAX_ANSWER_ARGUMENT_CHARS = 2 * MAX_FILE_CHARS
NOTES = 8  # recent attempts shown in the brief
NUDGE_TOOLS = ("Use the tools: write your files with write_file (or change them with edit_file), check them with "
               "evaluate, and call finish with a short note when you have a candidate.")
NUDGE_TEXT = ("Reply with your candidate's files in fenced blocks named with path=..., e.g. ```python path=main.py, "
              "or a line FINISH: <note> when you have nothing more to try.")


# History trimming on a plain message list, as this module offered it before core.llm.context.
trim_history = context.trim_history
TRIM_NOTE = context.TRIM_NOTE


@dataclass(frozen=True)
class Step:
    """What one answer did."""

    new_candidate: bool = False  # a candidate unlike every earlier attempt was evaluated
    failed: bool = False  # nothing in it worked (garbage, or only failed tool calls)
    finished: bool = False  # the turn ends


class LlmAgent:
    kind = "llm"

    def __init__(self, config: FleetConfig, *, client: LlmClient | None = None, cooldown_s: float = 30.0):
        self.config = config
        self.cfg = config.llm  # the model profile of the current turn (work() sets it)
        self._client = client
        self.cooldown_s = cooldown_s  # after a call that gave up, before the endpoint is tried again
        # Per model (endpoint and name): its token count of the last request it answered (core.llm.context).
        self._meters: dict[tuple[str, str], TokenMeter] = {}

    def can_work_on(self, best: AttemptRow | None, members: Sequence[AttemptRow] = (),
                    seed: AttemptRow | None = None) -> bool:
        return True

    @property
    def client(self) -> LlmClient:
        """The given client, else the run's shared one of this turn's profile."""
        return self._client if self._client is not None else LlmClient.shared(self.cfg)

    # ---------------------------------------------------------------- the turn

    async def work(self, bench: Workbench) -> WorkOutcome:
        self.cfg = profile_llm(self.config.llm, bench.agent.profile)
        client, cfg = self.client, self.cfg
        if client.down_reason:
            return self._retire(bench, client)
        if not await self._wait_out_cooldown(bench, client):
            return WorkOutcome.STOPPED
        mode = "text" if client.tools_supported is False else "tools"
        best = bench.best()
        # The workspace starts from a frontier member (the rule in core.fleet.frontier.choose_start), which is the
        # best unless another member leads the workload furthest from its bound.
        start = bench.starting_point()
        origin = start[0] if start is not None else best
        workspace = Workspace.from_solution(origin.solution if origin is not None else None)
        toolbox = Toolbox(bench, workspace, author=bench.agent.name or "llm",
                          parent_id=origin.id if origin is not None else None,
                          device_tools_per_turn=cfg.device_tools_per_turn)
        history = History(self._opening(bench, best, workspace, mode, start))
        failures = idle = 0
        for _ in range(cfg.max_steps):
            if bench.should_stop():
                return WorkOutcome.STOPPED
            tools = tool_schemas() if mode == "tools" else None
            # The window less the answer's room, by the server's count of tokens (tool schemas included).
            history.fit(self._meter(), tools, max(1024, cfg.context_tokens - cfg.max_tokens))
            try:
                reply = await self._call(bench, client, history.messages(), tools)
            except ToolsRejected as exc:
                if cfg.tool_calling == "tools":
                    bench.log(f"llm unavailable: the endpoint rejects tool calls ({exc}); tool_calling = \"tools\"")
                    client.unavailable_until = time.monotonic() + self.cooldown_s
                    return WorkOutcome.STOPPED
                client.tools_supported = False
                bench.log(f"llm: the endpoint rejects tool calls ({exc}); using the text protocol")
                mode = "text"
                history = History(self._opening(bench, best, workspace, mode, start))
                continue
            except LlmDown:
                return self._retire(bench, client)
            except LlmUnavailable as exc:
                bench.log(f"llm unavailable: {exc}")
                left = client.seconds_until_down()
                # Tried again no later than the moment it would count as down, so a dead endpoint is found out.
                client.unavailable_until = time.monotonic() + min(self.cooldown_s, left if left is not None
                                                                  else self.cooldown_s)
                return WorkOutcome.STOPPED
            step = await self._handle(bench, toolbox, reply, history, mode)
            if step.finished:
                return WorkOutcome.STOPPED
            failures = failures + 1 if step.failed else 0
            idle = 0 if step.new_candidate else idle + 1
            if failures >= cfg.max_failures_in_row:
                bench.log(f"llm: ending the turn after {failures} failed answers in a row")
                return WorkOutcome.EXHAUSTED
            if idle >= cfg.no_progress_calls:
                bench.log(f"llm: ending the turn, no progress: {idle} model calls in a row without a new candidate")
                return WorkOutcome.EXHAUSTED
        bench.log(f"llm: ending the turn after {cfg.max_steps} model calls without finish")
        return WorkOutcome.STOPPED

    async def _call(self, bench: Workbench, client: LlmClient, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None) -> LlmReply:
        """One model call within the budgets (BudgetSpent before it, if it could pass one), every try recorded; the
        server's count of the request's tokens calibrates the model's meter."""
        parts = request_parts(messages, tools)
        prompt, completion = self._meter().count(parts), self.cfg.max_tokens
        with bench.reserve_call(prompt + completion, cost(self.cfg, prompt, completion)):
            reply = await client.chat(messages, tools=tools, on_retry=bench.log, on_call=bench.record_call)
            bench.record_call(self._judged(reply))
        if not reply.call.tokens_estimated:
            self._meters[self._model()] = self._meter().observe(parts, reply.call.prompt_tokens)
        return reply

    def _model(self) -> tuple[str, str]:
        return self.cfg.base_url, self.cfg.model

    def _meter(self) -> TokenMeter:
        return self._meters.get(self._model()) or TokenMeter()

    def _judged(self, reply: LlmReply) -> LlmCall:
        """The answer's call record, marked garbage when the agent cannot use the answer at all."""
        limit = self.cfg.max_answer_chars
        if len(reply.content) > limit:
            return replace(reply.call, outcome="garbage",
                           detail=f"oversized answer: {len(reply.content)} characters (limit {limit})")
        if not reply.tool_calls:
            parsed = parse_text_reply(reply.content)
            if not parsed.changes and parsed.finish_note is None:
                return replace(reply.call, outcome="garbage", detail=_snippet(reply.content))
        return reply.call

    def _retire(self, bench: Workbench, client: LlmClient) -> WorkOutcome:
        if client.announce_down():
            bench.log(f"{client.down_reason}: LLM agents stopped", kind="llm")
        return WorkOutcome.RETIRED

    def _opening(self, bench: Workbench, best: AttemptRow | None, workspace: Workspace, mode: str,
                 start: tuple[AttemptRow, StartingChoice] | None = None) -> list[dict[str, Any]]:
        brief = problem_brief(bench.problem, bench.row(), best, bench.attempts(), agent_id=bench.agent.id,
                              spec=workspace.spec, files=list(workspace.files), sources=workspace.files,
                              facts=bench.facts(), similar=bench.similar_bests(), notes=bench.family_notes(),
                              plateau_attempts=self.config.planner.plateau_attempts, tool_hints=mode == "tools",
                              max_notes=NOTES, start=start[1] if start is not None else None)
        if start is not None and best is not None and start[0].id != best.id:
            task = (f"Write a correct candidate that is faster than attempt {start[0].id} on the workloads it leads "
                    "(or faster than the current best overall), starting from the workspace above.")
        else:
            task = ("Write a correct candidate that is faster than the current best (or than the reference if there "
                    "is none), starting from the workspace above.")
        return [{"role": "system", "content": system_prompt(mode, self.cfg)},
                {"role": "user", "content": brief + "\n" + task}]

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

    # ---------------------------------------------------------------- answers

    async def _handle(self, bench: Workbench, toolbox: Toolbox, reply: LlmReply, history: History,
                      mode: str) -> Step:
        nudge = NUDGE_TOOLS if mode == "tools" else NUDGE_TEXT
        limit = self.cfg.max_answer_chars
        if len(reply.content) > limit:
            # Never whole in the history: it would be sent again with every later request.
            step = history.answer({"role": "assistant", "content": reply.content[:limit]
                                   + f"\n... ({len(reply.content) - limit} more characters cut)"})
            history.note(step_record(step, "", [f"an answer of {len(reply.content)} characters, over the limit: "
                                                "not used"]))
            self._failure(bench, f"oversized answer: {len(reply.content)} characters (max_answer_chars {limit})",
                          reply)
            history.add({"role": "user", "content": f"Your answer was {len(reply.content)} characters, over the "
                                                    f"limit of {limit}: it was cut and not used. {nudge}"})
            return Step(failed=True)
        step = history.answer(_history_message(reply))
        if reply.tool_calls:
            return await self._handle_tool_calls(bench, toolbox, reply, history, step)
        parsed = parse_text_reply(reply.content)
        if parsed.changes:
            files = action_line("files", dict(parsed.files)) if parsed.files else ""
            try:
                for path, content in parsed.files:
                    toolbox.workspace.write(path, content)
            except WorkspaceError as exc:
                return self._text_refused(bench, history, reply, step, files, f"no files: {exc}", nudge)
            for path, diff in parsed.diffs:
                try:
                    toolbox.workspace.edit(path, diff=diff)
                except WorkspaceError as exc:
                    return self._text_refused(bench, history, reply, step, action_line("diff", {"path": path}),
                                              f"malformed tool call: edit_file: {exc}", nudge)
            finishing = parsed.finish_note is not None
            result = await toolbox.call("finish" if finishing else "evaluate",
                                        {"note": parsed.finish_note} if finishing else {})
            if result.failure:
                self._failure(bench, result.failure, reply)
            self._log_finish(bench, result, parsed.finish_note or "")
            edits = [action_line("diff", {"path": path}) for path, _ in parsed.diffs]
            history.note(step_record(step, reply.content, [a for a in (files, *edits) if a]
                                     + [action_line("finish" if finishing else "evaluate", {}, result)],
                                     [result.attempt] if result.attempt is not None else []))
            follow = "" if result.finished else ("\nReply with a fixed or faster version, or FINISH: <note>."
                                                 if mode == "text" else "\n" + NUDGE_TOOLS)
            history.add({"role": "user", "content": _clip(result.text) + follow})
            return Step(new_candidate=result.attempt is not None, failed=result.failure is not None,
                        finished=result.finished)
        if parsed.finish_note is not None:
            bench.log(f"llm: turn finished: {parsed.finish_note[:200]}" if parsed.finish_note else
                      "llm: turn finished")
            return Step(finished=True)
        if parsed.blocks:
            self._failure(bench, "no files: code blocks without path=", reply)
            history.note(step_record(step, reply.content, ["code blocks without path=: not used"]))
            history.add({"role": "user", "content": "Your reply has code blocks but none names its file. " + nudge})
        else:
            cut = " (cut off at max_tokens)" if reply.finish_reason == "length" else ""
            self._failure(bench, f"garbage answer{cut}: {_snippet(reply.content)}", reply)
            history.note(step_record(step, "", [f"an answer with no tool call, file or FINISH{cut}"]))
            history.add({"role": "user", "content": nudge})
        return Step(failed=True)

    def _text_refused(self, bench: Workbench, history: History, reply: LlmReply, step: int, action: str,
                      failure: str, nudge: str) -> Step:
        """A text reply whose files or diffs the workspace refused: nothing evaluated."""
        self._failure(bench, failure, reply)
        history.note(step_record(step, reply.content, [f"{action} -> failed: {failure}"]))
        history.add({"role": "user", "content": f"error: {failure.split(': ', 1)[-1]}\n{nudge}"})
        return Step(failed=True)

    async def _handle_tool_calls(self, bench: Workbench, toolbox: Toolbox, reply: LlmReply, history: History,
                                 step: int) -> Step:
        worked, new_candidate, finished = False, False, False
        actions: list[str] = []
        attempts = []
        admitted = _admitted(reply.tool_calls)
        for i, call in enumerate(reply.tool_calls):
            if finished:
                history.add({"role": "tool", "tool_call_id": call.id, "content": "skipped: the turn ended"})
                continue
            args, problem = _arguments(call.arguments)
            if i not in admitted and problem is None:
                problem = (f"this answer's tool-call arguments pass {MAX_ANSWER_ARGUMENT_CHARS} characters in all; "
                           "this call was not run")
            if call.name not in registry():
                problem = f"unknown tool {call.name!r}"
            if problem is not None:
                self._failure(bench, f"malformed tool call: {call.name or '(no name)'}: {problem}", reply)
                result = ToolResult(f"error: {problem}. Call one of: {', '.join(sorted(registry()))}, with JSON "
                                    f"object arguments of at most {MAX_FILE_CHARS} characters.", failure=problem)
            else:
                result = await toolbox.call(call.name, args)
                if result.failure:
                    self._failure(bench, result.failure, reply)
                else:
                    worked = True
                if result.attempt is not None:
                    attempts.append(result.attempt)
                new_candidate = new_candidate or result.attempt is not None
                finished = result.finished
                if call.name == "finish":
                    note = args.get("note")
                    self._log_finish(bench, result, note if isinstance(note, str) else "")
            actions.append(action_line(call.name or "(no name)", args, result))
            history.add({"role": "tool", "tool_call_id": call.id, "content": _clip(result.text)})
        history.note(step_record(step, reply.content, actions, attempts))
        return Step(new_candidate=new_candidate, failed=not worked, finished=finished)

    @staticmethod
    def _log_finish(bench: Workbench, result: ToolResult, note: str) -> None:
        """A finish that evaluated nothing (its candidate equals a fully evaluated attempt) keeps its note here."""
        if result.finished and result.equal_to is not None:
            bench.log(f"llm: turn finished, the candidate equals attempt {result.equal_to.id}"
                      + (f": {note[:200]}" if note else ""))

    def _failure(self, bench: Workbench, what: str, reply: LlmReply) -> None:
        bench.log(f"{what} ({reply.tokens} tokens)")


def _history_message(reply: LlmReply) -> dict[str, Any]:
    """The answer as the history keeps it: tool-call arguments over the file limit replaced by a short note."""
    message = dict(reply.message)
    if "tool_calls" in message:
        admitted = _admitted(reply.tool_calls)
        message["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": c["function"]["arguments"] if i in admitted else
                               _placeholder(c["function"]["arguments"])}}
            for i, c in enumerate(message["tool_calls"])]
    return message


def _admitted(calls) -> set[int]:
    """Indices of the calls whose arguments are within the file limit and, together, within the answer's."""
    admitted, total = set(), 0
    for i, call in enumerate(calls):
        size = len(call.arguments)
        if size <= MAX_FILE_CHARS and total + size <= MAX_ANSWER_ARGUMENT_CHARS:
            admitted.add(i)
            total += size
    return admitted


def _placeholder(arguments: str) -> str:
    return json.dumps({"omitted": f"{len(arguments)} characters of arguments, over the limit of {MAX_FILE_CHARS} "
                                  f"a call and {MAX_ANSWER_ARGUMENT_CHARS} an answer"})


def _arguments(text: str) -> tuple[dict[str, Any], str | None]:
    if len(text) > MAX_FILE_CHARS:
        return {}, f"{len(text)} characters of arguments, over the limit of {MAX_FILE_CHARS}"
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
    text = " ".join((text or "")[:4 * limit].split())
    if not text:
        return "(empty)"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _clip(text: str, limit: int = MAX_TOOL_RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"
