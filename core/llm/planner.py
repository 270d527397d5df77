"""The planner model (``[planner] mode = "llm"``): every ``llm_interval_s`` a model reads the fleet's figures as a
short text (per problem also its worst workloads against T_sol, the languages tried, the newest failures, and its op
family's notes board) and proposes controls, the same commands a person gives (``core.store.controls.COMMANDS``),
each with a reason. The run applies them through ``core.fleet.controls.apply_control`` and records each as a
``decision`` event "planner model: <reason> (...)"; the rules planner still runs every tick, so budgets, closures
and the agents' placement stay its own, steered by the priorities and pins the model sets. The model may also
``direct`` an agent or a problem: a short instruction with its reason, recorded as a ``directive`` event
(``core.fleet.directives``) that the agent's (or every agent on the problem's) next brief shows.

What goes to the model is bounded (``MAX_PROBLEMS_SHOWN`` problems, ``MAX_STATE_CHARS`` of figures and
``MAX_DETAILS_CHARS`` of details) and redacted by the client. Its answer is untrusted: it may be garbage, huge, name
unknown commands or problems, or propose too much; ``parse_answer`` keeps what is valid (at most ``max_actions``) and
says why it refused the rest.

``fleet_state``, ``planner_messages`` and ``parse_answer`` are pure; ``LlmPlanner.propose`` makes the one model call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from core.fleet.directives import MAX_INSTRUCTION_CHARS
from core.llm.brief import note_line
from core.llm.gaps import WorkloadGap, gaps_text
from core.planner.model import CLOSED_STATUSES
from core.report.figures import FleetFigures, problem_figures
from core.store.model import AgentRow, EventRow, LlmCall, NoteRow, ProblemRow

if TYPE_CHECKING:
    from core.config.schema import BudgetConfig, LlmConfig, PlannerConfig
    from core.llm.client import LlmClient, LlmReply

# command -> what its target is and whether it takes an integer value: the person's controls a model may use
# (never stop_run: ending the run is a person's or a budget's call).
PLANNER_COMMANDS: dict[str, tuple[str, bool]] = {
    "set_priority": ("problem", True),
    "bump_priority": ("problem", True),
    "pin_problem": ("problem", False),
    "unpin_problem": ("problem", False),
    "pause_problem": ("problem", False),
    "resume_problem": ("problem", False),
    "pause_agent": ("agent", False),
    "resume_agent": ("agent", False),
}
DIRECT = "direct"  # not a control: an instruction to an agent or a problem, recorded for its next brief
MAX_PRIORITY = 100  # |value| of a priority the model may set or add
MAX_PROBLEMS_SHOWN = 60
MAX_AGENTS_SHOWN = 40
MAX_DETAILED = 30  # the shown problems whose details (gaps, languages, failures) the model reads
MAX_LINE_CHARS = 300
MAX_DETAIL_CHARS = 500
MAX_BOARD_NOTES = 3  # the newest notes of the board of each open problem's op family
MAX_BOARD_NOTE_CHARS = 140
MAX_DIRECTIVES_SHOWN = 8  # the newest directives given, so the model does not repeat itself
MAX_STATE_CHARS = 16_000  # the figures
MAX_DETAILS_CHARS = 8_000  # the problems' details, the notes boards and the directives given, after the figures
MAX_ANSWER_CHARS = 20_000
MAX_REASON_CHARS = 200
MAX_ITEMS_READ = 200  # items of one answer looked at; the rest are counted, not read
TOOL_NAME = "control"
MARKER = "You steer a kernelfleet run"  # the system prompt's start (tests route the planner's requests by it)


@dataclass(frozen=True)
class ProblemFigures:
    key: str
    status: str
    priority: int
    pinned: bool
    paused: bool
    best_speedup: float | None
    best_sol: float | None
    attempts: int
    since_improvement: int
    failures_in_row: int
    agents: tuple[str, ...]
    gpu_seconds: float
    tokens: int
    dollars: float
    frontier: str = ""  # a short per-workload summary where the run keeps one
    family: str = ""  # its op family (core.fleet.similar.op_family): the notes board it shares
    gaps: str = ""  # its worst workloads against T_sol and T_b (core.llm.gaps.gaps_text)
    languages: str = ""  # the languages tried: "pytorch 5 (3 passed), triton 2 (0 passed)"
    failures: tuple[str, ...] = ()  # the newest failed attempts' "#id STATUS: reason", newest first


@dataclass(frozen=True)
class ProblemDetail:
    """What the planner model reads of a problem beyond its row's figures (the loop gathers it from the store)."""

    family: str = ""
    gaps: tuple[WorkloadGap, ...] = ()
    languages: tuple[tuple[str, int, int], ...] = ()  # (language, attempts, passing ones), the most tried first
    failures: tuple[tuple[int, str, str], ...] = ()  # the newest failed attempts: (id, status, reason), newest first


@dataclass(frozen=True)
class AgentFigures:
    name: str
    kind: str
    state: str
    problem: str  # its problem's key, "" when idle
    paused: bool


@dataclass(frozen=True)
class FleetState:
    elapsed_s: float
    attempts: int
    tokens: int
    dollars: float
    gpu_seconds: float
    gpu_busy: float | None  # fraction of the pool's GPU time busy, where known
    budgets: tuple[str, ...]  # "run tokens: 1200 of 5000", the limits that are set
    rules: str  # how the rules planner uses what the model sets
    problems: tuple[ProblemFigures, ...]
    agents: tuple[AgentFigures, ...]
    device_word: str = "GPU"  # what the run's devices are (core.store.model.device_word): "CPU" on a CPU run
    fleet: FleetFigures | None = None  # over every problem's best (core.report.figures), as the TUI and report show
    boards: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (op family, its newest notes as lines)
    directives: tuple[str, ...] = ()  # the newest directives given, as lines


def fleet_state(problems: Iterable[ProblemRow], agents: Iterable[AgentRow], totals: Mapping[str, float], *,
                elapsed_s: float, gpu_busy: float | None, planner: PlannerConfig, budgets: BudgetConfig,
                device_word: str = "GPU", details: Mapping[int, ProblemDetail] | None = None,
                boards: Mapping[str, Iterable[NoteRow]] | None = None,
                directives: Iterable[EventRow] = ()) -> FleetState:
    """The fleet's figures from store rows (pure); ``details``: problem id -> what the model reads beyond them;
    ``boards``: op family -> its newest notes; ``directives``: the newest directive events."""
    problems, agents = list(problems), list(agents)
    keys = {p.id: p.key for p in problems}
    on: dict[int, list[str]] = {}
    for a in agents:
        if a.problem_id is not None:
            on.setdefault(a.problem_id, []).append(a.name)
    spent = {"wall seconds": elapsed_s, "attempts": totals.get("attempts", 0), "tokens": totals.get("tokens", 0),
             "dollars": totals.get("dollars", 0.0)}
    limits = []
    for what, limit in (("wall seconds", budgets.run_wall_s), ("attempts", budgets.run_attempts),
                        ("tokens", budgets.run_tokens), ("dollars", budgets.run_dollars)):
        if limit > 0:
            limits.append(f"run {what}: {_num(spent[what])} of {_num(limit)}")
    for what, limit in (("attempts", budgets.problem_attempts), ("tokens", budgets.problem_tokens),
                        ("dollars", budgets.problem_dollars), ("wall seconds", budgets.problem_wall_s)):
        if limit > 0:
            limits.append(f"each problem's {what}: {_num(limit)}")
    rules = (f"Every {planner.tick_s:g} s the rules give agents to open problems by score = "
             f"{planner.weight_priority:g}*priority + {planner.weight_sol_gap:g}*(1 - best SOL) + "
             f"{planner.weight_improvement:g}*recent gain - {planner.weight_failures:g}*failures/"
             f"{planner.max_consecutive_failures}; pinned problems first, at most {planner.max_agents_per_problem} "
             f"agents a problem. A problem closes after {planner.plateau_attempts} attempts without a "
             f"{planner.plateau_min_gain:g} SOL gain (plateaued; never while pinned), after "
             f"{planner.max_consecutive_failures} failures in a row, or when a budget is spent; resume_problem "
             "reopens a plateaued or failed one.")
    details = details or {}
    figures = tuple(_figures(p, tuple(on.get(p.id, ())), details.get(p.id, ProblemDetail())) for p in problems)
    agent_figures = tuple(AgentFigures(a.name, a.kind, a.state, keys.get(a.problem_id, ""), a.paused)
                          for a in agents)
    names = {a.id: a.name for a in agents}
    board_lines = tuple((family, tuple(note_line(n, MAX_BOARD_NOTE_CHARS) for n in notes))
                        for family, notes in (boards or {}).items())
    given = tuple(_directive_line(e, names, keys) for e in directives)
    return FleetState(elapsed_s, int(totals.get("attempts", 0)), int(totals.get("tokens", 0)),
                      float(totals.get("dollars", 0.0)), float(totals.get("gpu_seconds", 0.0)), gpu_busy,
                      tuple(limits), rules, figures, agent_figures, device_word, problem_figures(problems),
                      board_lines, given)


def _figures(p: ProblemRow, agents: tuple[str, ...], detail: ProblemDetail) -> ProblemFigures:
    languages = ", ".join(f"{name} {tried} ({passing} passed)" for name, tried, passing in detail.languages)
    failures = tuple(_clip(f"#{attempt_id} {status}: {reason}" if reason else f"#{attempt_id} {status}", 160)
                     for attempt_id, status, reason in detail.failures)
    return ProblemFigures(p.key, p.status, p.priority, p.pinned, p.paused, p.best_speedup, p.best_sol, p.attempts,
                          p.since_improvement, p.failures_in_row, agents, p.gpu_seconds, p.tokens, p.dollars,
                          frontier_text(p), detail.family, gaps_text(detail.gaps), languages, failures)


def _directive_line(e: EventRow, names: Mapping[int, str], keys: Mapping[int, str]) -> str:
    if e.agent_id is None:
        to = f"problem {keys.get(e.problem_id, e.problem_id)}"
    else:
        to = names.get(e.agent_id, f"agent {e.agent_id}") + (f" (on {keys[e.problem_id]})" if e.problem_id in keys
                                                             else "")
    return _clip(f"to {to}: {e.message}", MAX_LINE_CHARS)


def frontier_text(p: ProblemRow) -> str:
    """Which attempts lead which workloads, where the store keeps a per-workload frontier: "#12 w0,w2; #15 w1"."""
    members = getattr(p, "frontier", ()) or ()
    return _clip("; ".join(f"#{m.attempt_id} w{','.join(str(i) for i in m.leads)}" for m in members), 120)


def _num(x: float) -> str:
    return f"{x:.2f}" if isinstance(x, float) and not float(x).is_integer() else str(int(x))


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown_order(p: ProblemFigures) -> tuple:
    # Open problems first (what the model can steer), the most-worked ones first among equals.
    return (p.status in CLOSED_STATUSES, -p.pinned, -p.priority, -p.attempts, p.key)


def state_text(state: FleetState) -> str:
    """The fleet's figures as a bounded text (at most MAX_STATE_CHARS), then the shown problems' details, their
    families' notes boards and the directives given lately (at most MAX_DETAILS_CHARS more)."""
    word = state.device_word
    busy = f", {word} busy {state.gpu_busy:.0%}" if state.gpu_busy is not None else ""
    lines = [f"Run: {state.elapsed_s:.0f} s, {state.attempts} attempts, {state.gpu_seconds:.1f} {word}-seconds in "
             f"attempts, {state.tokens} tokens, ${state.dollars:.2f}{busy}",
             *([fleet_text(state.fleet)] if state.fleet is not None else []),
             "Budgets: " + ("; ".join(state.budgets) if state.budgets else "none set"),
             "Rules: " + state.rules, ""]
    agents = state.agents[:MAX_AGENTS_SHOWN]
    lines.append("Agents (name | kind | state | problem):")
    lines += [_clip(f"{a.name} | {a.kind} | {a.state}{' (paused)' if a.paused else ''} | {a.problem or '-'}",
                    MAX_LINE_CHARS) for a in agents]
    if len(state.agents) > len(agents):
        lines.append(f"... and {len(state.agents) - len(agents)} more agents")
    lines += ["", "Problems (key | status | priority | pinned | best speedup | best SOL | attempts | attempts since "
                  f"a gain | failures in a row | agents | {word} s | tokens | $ | frontier):"]
    shown = sorted(state.problems, key=_shown_order)[:MAX_PROBLEMS_SHOWN]
    for p in shown:
        lines.append(_clip(" | ".join([
            p.key, p.status + (" (paused)" if p.paused and p.status != "paused" else ""), f"{p.priority:+d}",
            "yes" if p.pinned else "no", f"{p.best_speedup:.3g}x" if p.best_speedup is not None else "-",
            f"{p.best_sol:.3g}" if p.best_sol is not None else "-", str(p.attempts), str(p.since_improvement),
            str(p.failures_in_row), ",".join(p.agents) or "-", f"{p.gpu_seconds:.1f}", str(p.tokens),
            f"{p.dollars:.2f}", p.frontier or "-"]), MAX_LINE_CHARS))
    hidden = len(state.problems) - len(shown)
    if hidden:
        counts: dict[str, int] = {}
        for p in sorted(state.problems, key=_shown_order)[MAX_PROBLEMS_SHOWN:]:
            counts[p.status] = counts.get(p.status, 0) + 1
        lines.append(f"... and {hidden} more problems (" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                     + ")")
    text = "\n".join(lines)
    text = text if len(text) <= MAX_STATE_CHARS else text[:MAX_STATE_CHARS] + "\n... (cut)"
    details = _detail_lines(shown[:MAX_DETAILED])
    if state.boards:
        details += ["", "Notes boards of the open problems' op families (newest last):"]
        details += [f"- {family}: " + (" | ".join(notes) if notes else "(empty)") for family, notes in state.boards]
    if state.directives:
        details += ["", "Directives you gave lately (oldest first):", *(f"- {d}" for d in state.directives)]
    more = "\n".join(details)
    more = more if len(more) <= MAX_DETAILS_CHARS else more[:MAX_DETAILS_CHARS] + "\n... (cut)"
    return text + ("\n" + more if more else "")


def _detail_lines(problems: Iterable[ProblemFigures]) -> list[str]:
    lines = []
    for p in problems:
        parts = [f"family {p.family}"] if p.family else []
        if p.gaps:
            parts.append(f"workloads: {p.gaps}")
        if p.languages:
            parts.append(f"tried {p.languages}")
        if p.failures:
            parts.append("newest failures: " + " | ".join(p.failures))
        if parts:
            lines.append(_clip(f"- {p.key}: " + "; ".join(parts), MAX_DETAIL_CHARS))
    if lines:
        lines[:0] = ["", "Problems in detail (workloads: the furthest from T_sol, their fastest passing time in "
                         "multiples of T_sol, then those slower than T_b and those with no passing time; the languages "
                         "tried: attempts and passing ones; the newest failures):"]
    return lines


def fleet_text(fleet: FleetFigures) -> str:
    """The fleet's figures as one line: "Fleet: geomean speedup 1.52x over 3 problems, ..."."""
    geo = f"{fleet.geomean_speedup:.3g}x" if fleet.geomean_speedup is not None else "-"
    mean = f"{fleet.mean_sol:.3g}" if fleet.mean_sol is not None else "-"
    return (f"Fleet: geomean speedup {geo} over {fleet.with_speedup} problems with one, mean best SOL {mean} over "
            f"{fleet.with_sol}, {fleet.beating_baseline} of {fleet.problems} problems faster than T_b")


def system_prompt(max_actions: int, device_word: str = "GPU") -> str:
    commands = "\n".join(f"- {name}: target a {target}" + (f", value an integer from -{MAX_PRIORITY} to "
                                                           f"{MAX_PRIORITY}" if valued else "")
                         for name, (target, valued) in PLANNER_COMMANDS.items())
    return (f"{MARKER}: agents (LLMs and tuners) optimise {device_word} kernels, one problem each at a time. You "
            "read the fleet's figures and propose changes that put the agents' time where it gains the most "
            f"speed-of-light (SOL) per {device_word}-second: raise the priority of problems with room left and "
            "recent gains, lower or pause those that stall, pin a problem that deserves agents now, unpin it later. "
            "You do not move agents yourself: the rules give agents to problems by priority and pins every few "
            "seconds. You can tell them what to try: read each problem's worst workloads, the languages tried, its "
            "newest failures and its op family's notes, and direct an agent (or every agent on a problem) with one "
            "concrete instruction, e.g. the workloads to focus on, a technique or language to try, a failure to fix "
            "first; the agent reads it at the start of its next turn.\n\n"
            f"Commands:\n{commands}\n- {DIRECT}: target an agent or a problem, with an instruction (at most "
            f"{MAX_INSTRUCTION_CHARS} characters)\n\n"
            "Answer with JSON only: {\"actions\": [{\"command\": ..., \"target\": ..., \"value\": ..., "
            "\"instruction\": ..., \"reason\": ...}]} where target is a problem key or an agent name exactly as "
            "listed, value only for priorities (set_priority sets it, bump_priority adds to it), instruction only "
            f"for {DIRECT}, and reason one short sentence a person (and, for {DIRECT}, the agent) reads. At most "
            f"{max_actions} actions; {{\"actions\": []}} when nothing should change. "
            f"With tools, call `{TOOL_NAME}` once per action instead.")


def planner_messages(state: FleetState, max_actions: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system_prompt(max_actions, state.device_word)},
            {"role": "user", "content": state_text(state) + "\n\nWhat should change now?"}]


def tool_schema() -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": TOOL_NAME, "description": f"Apply one control to the run, or ({DIRECT}) give an agent or a problem's "
                                          "agents an instruction, with a reason a person reads.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "enum": [*PLANNER_COMMANDS, DIRECT]}, "target": {"type": "string"},
            "value": {"type": "integer"}, "instruction": {"type": "string", "description": f"{DIRECT} only: what to "
                                                                                         "try, one or two sentences"},
            "reason": {"type": "string"}},
            "required": ["command", "target", "reason"]}}}


# ---------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Proposal:
    command: str
    target: str  # a problem key or an agent name, as the run knows it
    value: int | None
    reason: str
    instruction: str = ""  # a directive's
    to_agent: bool = False  # a directive's target is an agent (else a problem)

    @property
    def target_kind(self) -> str:
        """"agent" or "problem"."""
        if self.command == DIRECT:
            return "agent" if self.to_agent else "problem"
        return PLANNER_COMMANDS[self.command][0]

    def describe(self) -> str:
        return f"{self.command} {self.target}" + (f" {self.value:+d}" if self.command == "bump_priority"
                                                  else f" {self.value}" if self.value is not None else "")


@dataclass(frozen=True)
class Refusal:
    what: str  # the item as far as it could be read
    why: str


@dataclass(frozen=True)
class PlannerAnswer:
    proposals: tuple[Proposal, ...]
    refusals: tuple[Refusal, ...]
    unusable: str | None = None  # why nothing in the answer could be read at all

    @property
    def garbage(self) -> bool:
        return self.unusable is not None


_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def _json_candidates(text: str) -> Iterable[str]:
    yield text.strip()
    for match in _FENCED.finditer(text):
        yield match.group(1).strip()
    for opening, closing in (("{", "}"), ("[", "]")):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            yield text[start:end + 1]


def _items_from_text(text: str) -> list[Any] | None:
    """The action items a text answer holds (a list, {"actions": [...]} or one action object); None if none."""
    for candidate in _json_candidates(text):
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            if isinstance(value.get("actions"), list):
                return value["actions"]
            if "command" in value:
                return [value]
    return None


def _resolve(target: Any, kind: str, problems: Collection[str], agents: Collection[str]) -> str | None:
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)
    if not isinstance(target, str) or not target.strip():
        return None
    target = target.strip()
    names = problems if kind == "problem" else agents
    if target in names:
        return target
    if kind == "problem":  # a problem's name without its subset, when only one problem has it
        matches = [k for k in problems if k.split("/", 1)[-1] == target]
        if len(matches) == 1:
            return matches[0]
    return None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,6}\s*", value):
        return int(value)
    return None


def _proposal(item: Any, problems: Collection[str], agents: Collection[str]) -> Proposal | Refusal:
    if not isinstance(item, dict):
        return Refusal(_clip(json.dumps(item, default=str), 80), "not an action object")
    command, target = item.get("command"), item.get("target")
    what = _clip(f"{command} {target if target is not None else ''}", 120)
    if command == DIRECT:
        return _directive(item, what, problems, agents)
    if not isinstance(command, str) or command not in PLANNER_COMMANDS:
        why = ("not a planner command (a person's)" if command == "stop_run" else
               f"unknown command; known: {', '.join([*PLANNER_COMMANDS, DIRECT])}")
        return Refusal(what, why)
    kind, valued = PLANNER_COMMANDS[command]
    resolved = _resolve(target, kind, problems, agents)
    if resolved is None:
        return Refusal(what, f"no {kind} {_clip(str(target), 80)!r} in this run")
    value = None
    if valued:
        value = _integer(item.get("value"))
        if value is None or abs(value) > MAX_PRIORITY:
            return Refusal(what, f"value must be an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, got "
                                 f"{_clip(repr(item.get('value')), 40)}")
    reason = item.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        return Refusal(what, "no reason given")
    return Proposal(command, resolved, value, _clip(reason, MAX_REASON_CHARS))


def _directive(item: dict, what: str, problems: Collection[str], agents: Collection[str]) -> Proposal | Refusal:
    target = item.get("target")
    agent = _resolve(target, "agent", problems, agents)
    resolved = agent or _resolve(target, "problem", problems, agents)
    if resolved is None:
        return Refusal(what, f"no agent or problem {_clip(str(target), 80)!r} in this run")
    instruction, reason = item.get("instruction"), item.get("reason")
    if not isinstance(instruction, str) or not instruction.strip():
        return Refusal(what, "no instruction given")
    if not isinstance(reason, str) or not reason.strip():
        return Refusal(what, "no reason given")
    return Proposal(DIRECT, resolved, None, _clip(reason, MAX_REASON_CHARS),
                    _clip(instruction, MAX_INSTRUCTION_CHARS), agent is not None)


def parse_answer(content: str, tool_calls: Iterable[tuple[str, str]] = (), *, problems: Collection[str],
                 agents: Collection[str], max_actions: int) -> PlannerAnswer:
    """The valid proposals of a model answer (text, or tool calls as (name, arguments) pairs), at most
    ``max_actions``, and why each other item was refused (pure)."""
    tool_calls = list(tool_calls)
    size = len(content or "") + sum(len(args or "") for _, args in tool_calls)
    if size > MAX_ANSWER_CHARS:
        return PlannerAnswer((), (), f"oversized answer: {size} characters (limit {MAX_ANSWER_CHARS})")
    items: list[Any] = []
    refusals: list[Refusal] = []
    if tool_calls:
        for name, arguments in tool_calls:
            try:
                args = json.loads(arguments or "{}")
            except (json.JSONDecodeError, RecursionError):
                refusals.append(Refusal(_clip(name or "(no name)", 60), "tool-call arguments are not JSON"))
                continue
            if not isinstance(args, dict):
                refusals.append(Refusal(_clip(name or "(no name)", 60), "tool-call arguments are not an object"))
            elif name == TOOL_NAME:
                items.append(args)
            elif name in PLANNER_COMMANDS or name == DIRECT:
                items.append({**args, "command": name})
            else:
                refusals.append(Refusal(_clip(name or "(no name)", 60), f"unknown tool; call {TOOL_NAME}"))
    else:
        found = _items_from_text(content or "")
        if found is None:
            return PlannerAnswer((), (), f"no JSON actions in the answer: {_clip(content or '(empty)', 120)!r}")
        items = found
    proposals: list[Proposal] = []
    seen: set[tuple[str, str]] = set()
    for item in items[:MAX_ITEMS_READ]:
        result = _proposal(item, problems, agents)
        if isinstance(result, Refusal):
            refusals.append(result)
        elif (result.command, result.target) in seen:
            refusals.append(Refusal(result.describe(), "the same command on the same target twice"))
        elif len(proposals) >= max_actions:
            refusals.append(Refusal(result.describe(), f"over the round's cap of {max_actions} actions"))
        else:
            seen.add((result.command, result.target))
            proposals.append(result)
    if len(items) > MAX_ITEMS_READ:
        refusals.append(Refusal(f"{len(items) - MAX_ITEMS_READ} more items", "not read"))
    return PlannerAnswer(tuple(proposals), tuple(refusals))


# ---------------------------------------------------------------- the call


class LlmPlanner:
    """One model call per round through the run's shared client, held against the run's budgets."""

    def __init__(self, cfg: LlmConfig, max_actions: int, *, client: LlmClient | None = None):
        self.cfg = cfg
        self.max_actions = max_actions
        self._client = client

    @property
    def client(self) -> LlmClient:
        if self._client is None:
            from core.llm.client import LlmClient  # the openai client is imported only in llm mode

            self._client = LlmClient.shared(self.cfg)
        return self._client

    async def propose(self, state: FleetState, *, reserve: Callable[[int, float], AbstractContextManager[None]],
                      record: Callable[[LlmCall], None], log: Callable[[str], None]) -> PlannerAnswer:
        """Ask the model; BudgetSpent before the call if it could pass a run budget, LlmUnavailable (or LlmDown)
        when the endpoint does not answer. Every try is recorded with ``record``."""
        from core.llm.client import ToolsRejected, cost, estimate_tokens

        client = self.client
        messages = planner_messages(state, self.max_actions)
        prompt, completion = estimate_tokens(messages), self.cfg.max_tokens
        with reserve(prompt + completion, cost(self.cfg, prompt, completion)):
            use_tools = self.cfg.tool_calling != "text" and client.tools_supported is not False
            try:
                reply = await client.chat(messages, tools=[tool_schema()] if use_tools else None, on_retry=log,
                                          on_call=record)
            except ToolsRejected:
                client.tools_supported = False
                reply = await client.chat(messages, on_retry=log, on_call=record)
            answer = self.judge(reply, state)
            record(replace(reply.call, outcome="garbage", detail=f"planner: {answer.unusable}"[:200])
                   if answer.garbage else replace(reply.call, detail=f"planner: {reply.call.detail}"[:200]))
        return answer

    def judge(self, reply: LlmReply, state: FleetState) -> PlannerAnswer:
        return parse_answer(reply.content, [(c.name, c.arguments) for c in reply.tool_calls],
                            problems=[p.key for p in state.problems], agents=[a.name for a in state.agents],
                            max_actions=self.max_actions)
