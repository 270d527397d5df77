"""The LLM agent's tools: a workspace of candidate files kept in memory, and handlers that go through the Workbench.

Candidate code is never imported or run here: ``build`` runs the static checks of ``core.fleet.checks`` (a parse,
nothing executes) and asks the Workbench to build; ``evaluate`` and ``finish`` record attempts through
``bench.evaluate``, which evaluates in the isolated worker processes. A candidate equal to an earlier attempt of the
problem that covered the same workloads is not evaluated again: the result names that attempt.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from core.errors import SpecError
from core.fleet.agent import Workbench
from core.fleet.checks import static_faults
from core.fleet.facts import language_refusal
from core.solution.io import parse_solution
from core.solution.schema import Solution
from core.solution.tunables import TUNABLES_MODULE_FILE
from core.llm.brief import workload_bests
from core.llm.edits import EditRefused, apply_diff, replace_once
from core.llm.toolkit import Tool, ToolRefused, ToolResult, registered
from core.store.model import AttemptRow

SPEC_FILE = "solution.json"
MAX_FILE_CHARS = 200_000
MAX_FILES = 32

DEFAULT_SPEC: dict[str, Any] = {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                                "dependencies": [], "destination_passing_style": True, "binding": None,
                                "compile_options": None}


class WorkspaceError(ToolRefused):
    """A request the workspace refuses (bad path, bad spec); the message goes back to the model."""


def check_path(path: Any) -> str:
    if not isinstance(path, str) or not path.strip():
        raise WorkspaceError("path must be a non-empty relative path")
    if "\\" in path or "\x00" in path:
        raise WorkspaceError(f"{path!r}: use '/' to separate folders")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise WorkspaceError(f"{path!r}: absolute paths are refused; give it relative to the solution folder")
    if ".." in pure.parts:
        raise WorkspaceError(f"{path!r}: '..' is refused")
    if path.endswith("/") or pure.name in ("", "."):
        raise WorkspaceError(f"{path!r} does not name a file")
    if pure.name == TUNABLES_MODULE_FILE:
        raise WorkspaceError(f"{TUNABLES_MODULE_FILE} is generated; declare tunables in tunables.json")
    return str(pure)


class Workspace:
    """The candidate being edited: source files (path -> text) and a spec (the solution.json ``spec`` object)."""

    def __init__(self, files: dict[str, str] | None = None, spec: dict[str, Any] | None = None):
        self.files: dict[str, str] = dict(files or {})
        self.spec: dict[str, Any] = dict(spec or DEFAULT_SPEC)

    @classmethod
    def from_solution(cls, solution: dict[str, Any] | None) -> Workspace:
        if not solution:
            return cls()
        files = {s["path"]: s["content"] for s in solution.get("sources", [])}
        return cls(files, solution.get("spec") or DEFAULT_SPEC)

    def write(self, path: Any, content: Any) -> str:
        path = check_path(path)
        if not isinstance(content, str):
            raise WorkspaceError("content must be a string")
        if len(content) > MAX_FILE_CHARS:
            raise WorkspaceError(f"{path}: {len(content)} characters is more than {MAX_FILE_CHARS}")
        if path == SPEC_FILE:
            return self._write_spec_file(content)
        if path not in self.files and len(self.files) >= MAX_FILES:
            raise WorkspaceError(f"at most {MAX_FILES} files")
        if not content.strip():
            self.files.pop(path, None)
            return f"{path}: removed (empty content)"
        self.files[path] = content
        return f"wrote {path} ({len(content)} characters)"

    def _write_spec_file(self, content: str) -> str:
        try:
            data = json.loads(content)
        except json.JSONDecodeError as exc:
            raise WorkspaceError(f"{SPEC_FILE}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise WorkspaceError(f"{SPEC_FILE}: expected an object")
        done = []
        if isinstance(data.get("spec"), dict):
            self.spec = {**DEFAULT_SPEC, **data["spec"]}
            done.append("spec set")
        sources = data.get("sources")
        if isinstance(sources, list):
            for i, source in enumerate(sources):
                if not isinstance(source, dict) or "path" not in source or "content" not in source:
                    raise WorkspaceError(f"{SPEC_FILE}: sources[{i}] needs path and content")
                self.write(source["path"], source["content"])
            done.append(f"{len(sources)} source(s) written")
        if not done:
            raise WorkspaceError(f"{SPEC_FILE}: no spec object and no sources in it")
        return f"{SPEC_FILE}: " + ", ".join(done)

    def edit(self, path: Any, *, old: Any = None, new: Any = None, diff: Any = None) -> str:
        """Change a file in place: ``old`` (occurring exactly once) replaced by ``new``, or a unified ``diff``."""
        path = check_path(path)
        if path == SPEC_FILE:
            raise WorkspaceError(f"{SPEC_FILE} cannot be edited; write it whole or use set_spec")
        exact = old is not None or new is not None
        if exact == (diff is not None):
            raise WorkspaceError("give either old and new (an exact replacement) or diff (a unified diff)")
        if exact and not (isinstance(old, str) and isinstance(new, str)):
            raise WorkspaceError("old and new must both be strings")
        if not exact and not isinstance(diff, str):
            raise WorkspaceError("diff must be a string")
        text = self.read(path)
        try:
            edited = replace_once(text, old, new) if exact else apply_diff(text, diff)
        except EditRefused as exc:
            raise WorkspaceError(f"{path}: {exc}") from None
        if edited == text:
            return f"{path}: unchanged (the edit gives the same text)"
        if not edited.strip():
            raise WorkspaceError(f"{path}: the edit would leave the file empty; write_file with empty content "
                                 "removes a file")
        self.write(path, edited)
        lines = edited.count("\n") + 1
        return f"edited {path} ({len(edited)} characters, {lines} lines)"

    def read(self, path: Any) -> str:
        path = check_path(path)
        if path == SPEC_FILE:
            return json.dumps({"spec": self.spec, "sources": [{"path": p, "content": "..."} for p in self.files]},
                              indent=2)
        if path not in self.files:
            raise WorkspaceError(f"no file {path!r}; files: {', '.join(self.files) or '(none)'}")
        return self.files[path]

    def set_spec(self, language: Any, entry_point: Any, destination_passing_style: Any = True) -> str:
        if not isinstance(language, str) or not isinstance(entry_point, str):
            raise WorkspaceError("language and entry_point must be strings")
        if not isinstance(destination_passing_style, bool):
            raise WorkspaceError("destination_passing_style must be true or false")
        self.spec = {**self.spec, "languages": [language], "entry_point": entry_point,
                     "destination_passing_style": destination_passing_style}
        return "spec: " + json.dumps({k: self.spec[k] for k in ("languages", "entry_point",
                                                                "destination_passing_style")})

    def solution(self, name: str, definition: str, author: str) -> Solution:
        """The workspace as a validated Solution (SpecError names the faulty field)."""
        if not self.files:
            raise WorkspaceError("no files: write the candidate's sources first")
        data = {"name": name, "definition": definition, "author": author, "spec": self.spec,
                "sources": [{"path": p, "content": c} for p, c in self.files.items()]}
        return parse_solution(data, SPEC_FILE)


async def _write_file(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    return ToolResult(box.workspace.write(args.get("path"), args.get("content")))


async def _edit_file(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    return ToolResult(box.workspace.edit(args.get("path"), old=args.get("old"), new=args.get("new"),
                                         diff=args.get("diff")))


async def _read_file(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    return ToolResult(box.workspace.read(args.get("path")))


async def _set_spec(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    box.check_language(args.get("language"))
    return ToolResult(box.workspace.set_spec(args.get("language"), args.get("entry_point"),
                                             args.get("destination_passing_style", True)))


async def _build(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    return await box.build()


async def _evaluate(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    return await box.evaluate(args.get("workloads"))


async def _finish(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    note = args.get("note")
    return await box.finish(note if isinstance(note, str) else "")


# Edits and evaluations: their results are attempts and log lines of their own, not tool events.
WORKSPACE_TOOLS: tuple[Tool, ...] = tuple(dataclasses.replace(tool, logged=False) for tool in (
    Tool("write_file", "Create or replace a file of your candidate (a relative path). Writing solution.json sets the "
                       "spec from its `spec` object.", _write_file,
         {"path": {"type": "string"}, "content": {"type": "string"}}, ("path", "content")),
    Tool("edit_file", "Change part of a file of your candidate without rewriting it: either `old` and `new` (the "
                      "exact text `old`, which must occur exactly once, is replaced by `new`) or `diff` (a unified "
                      "diff of that file: @@ hunks whose context and - lines must match the file exactly).",
         _edit_file, {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                      "diff": {"type": "string"}}, ("path",)),
    Tool("read_file", "Read a file of your candidate.", _read_file, {"path": {"type": "string"}}, ("path",)),
    Tool("set_spec", "Choose the solution spec: language (one this run allows: see the brief), entry point "
                     "('file.py::function') and destination passing style.", _set_spec,
         {"language": {"type": "string"}, "entry_point": {"type": "string"},
          "destination_passing_style": {"type": "boolean"}}, ("language", "entry_point")),
    Tool("build", "Build the candidate without running it: compile errors, or the ptxas resource report.", _build),
    Tool("evaluate", "Evaluate the candidate (recorded as an attempt): correctness and timing per workload. Give "
                     "workload indices to evaluate a few; leave out for all.", _evaluate,
         {"workloads": {"type": "array", "items": {"type": "integer"}}}),
    Tool("finish", "Submit the candidate for a full evaluation and end your turn, with a short note on what you did "
                   "and learned (other agents read it).", _finish, {"note": {"type": "string"}}, ("note",)),
))


def verdict_line(attempt: AttemptRow) -> str:
    """An attempt's overall verdict in one line: status, speedup and SOL, or the reason it failed."""
    head = str(attempt.status)
    if attempt.passed:
        if attempt.speedup is not None:
            head += f", speedup {attempt.speedup:.3g}x over T_b"
        if attempt.sol is not None:
            head += f", SOL {attempt.sol:.3g}"
        if not attempt.full:
            head += " (partial: not a candidate for best until evaluated on every workload)"
    elif attempt.reason:
        head += f": {_clip(attempt.reason, 1500)}"
    return head


def verdict_table(attempt: AttemptRow, workloads_info: tuple = (), axes: dict[int, str] | None = None) -> str:
    """A short text of an attempt's verdict: overall line, then one line per evaluated workload."""
    infos = {w.index: w for w in workloads_info}
    lines = [f"attempt {attempt.id}: {verdict_line(attempt)}", "workload | axes | status | time | T_b | T_sol | detail"]
    for wv in (attempt.verdict or {}).get("workloads", []):
        index = wv.get("index")
        status = wv.get("status")
        status = getattr(status, "value", status)
        timing = wv.get("timing") or {}
        info = infos.get(index)
        t = timing.get("median_ms")
        detail = _failure_detail(wv)
        lines.append(" | ".join([str(index), (axes or {}).get(index, info.axes if info else ""), str(status),
                                 f"{t:.4g} ms" if t is not None else "-",
                                 f"{info.t_b_ms:.4g} ms" if info and info.t_b_ms is not None else "-",
                                 f"{info.t_sol_ms:.4g} ms" if info and info.t_sol_ms is not None else "-",
                                 detail.strip()]))
    return "\n".join(lines)


def progress_table(attempt: AttemptRow, workloads_info: tuple = (), axes: dict[int, str] | None = None,
                   bests: dict[int, tuple[float, int]] | None = None) -> str:
    """An evaluation's result as the agent sees it: the overall line, then one compact row per evaluated workload:
    its time against ``bests`` (the fastest passing time before this attempt, and its attempt), the speedup over
    T_b and the share of the speed of light reached (T_sol / time); a failed workload named with its reason."""
    infos, bests = {w.index: w for w in workloads_info}, bests or {}
    lines = [f"attempt {attempt.id}: {verdict_line(attempt)}",
             "workload | axes | time | vs best so far | speedup over T_b | T_sol / time"]
    for wv in (attempt.verdict or {}).get("workloads", []):
        index, status = wv.get("index"), wv.get("status")
        status = getattr(status, "value", status)
        info = infos.get(index)
        row = [str(index), (axes or {}).get(index, info.axes if info else "")]
        t = (wv.get("timing") or {}).get("median_ms")
        if status != "PASSED" or not isinstance(t, (int, float)) or t <= 0:
            detail = _failure_detail(wv)
            lines.append(" | ".join(row + [f"{status}: {detail}" if detail else str(status)]))
            continue
        best = bests.get(index)
        versus = "first pass" if best is None else (f"{(t / best[0] - 1) * 100:+.1f}% vs {best[0]:.4g} ms "
                                                    f"(attempt {best[1]})" + (", new best" if t < best[0] else ""))
        t_b = info.t_b_ms if info is not None else None
        t_sol = info.t_sol_ms if info is not None else None
        lines.append(" | ".join(row + [f"{t:.4g} ms", versus, f"{t_b / t:.3g}x" if t_b else "-",
                                       f"{t_sol / t:.0%}" if t_sol else "-"]))
    return "\n".join(lines)


def _failure_detail(wv: dict[str, Any]) -> str:
    """Why a workload did not pass, in one line ("" when it passed)."""
    status = getattr(wv.get("status"), "value", wv.get("status"))
    if status == "PASSED":
        return ""
    detail = _clip(" ".join(str(wv.get("reason", "")).split()), 300)
    errors = wv.get("errors") or {}
    if status == "INCORRECT_NUMERICAL" and errors:
        detail += (f" max_abs {errors.get('max_abs_error', 0):.3g}, max_rel {errors.get('max_rel_error', 0):.3g},"
                   f" matched {errors.get('matched_ratio', 0):.4g}")
    return detail.strip()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Toolbox:
    """Runs the model's tool calls against a workspace and a Workbench."""

    def __init__(self, bench: Workbench, workspace: Workspace, *, author: str, parent_id: int | None = None,
                 device_tools_per_turn: int = 6):
        self.bench = bench
        self.workspace = workspace
        self.author = author
        self.parent_id = parent_id
        self.candidates = 0
        self.device_tools = 0  # instrument runs that held a device, this turn
        self.device_tools_per_turn = device_tools_per_turn
        self.notes_written = 0  # by the note tool, this turn

    def check_language(self, language: Any) -> None:
        """WorkspaceError naming the allowed languages when ``language`` is not one this run allows."""
        refusal = language_refusal(language, self.bench.facts().languages) if isinstance(language, str) else None
        if refusal is not None:
            raise WorkspaceError(refusal)

    def _solution(self) -> Solution:
        languages = self.workspace.spec.get("languages")
        if isinstance(languages, list) and languages:
            self.check_language(languages[0])
        self.candidates += 1
        return self.workspace.solution(f"{self.author}_{self.bench.problem.name}_{self.candidates}",
                                       self.bench.problem.name, self.author)

    def candidate_solution(self) -> Solution:
        """The workspace as a Solution for a tool to build or run (WorkspaceError/SpecError when it is not one)."""
        return self._solution()

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        tools = registry()
        tool = tools.get(name)
        if tool is None:
            return ToolResult(f"error: no tool {name!r} (tools: {', '.join(sorted(tools))})",
                              failure=f"malformed tool call: unknown tool {name!r}")
        started = time.monotonic()
        try:
            result = await tool.run(self, args)
            if tool.logged:
                shown = ", ".join(f"{k} {_clip(' '.join(str(v).split()), 60)}" for k, v in args.items())
                self.bench.log(f"{name}{f' ({shown})' if shown else ''}: {time.monotonic() - started:.1f} s, "
                               f"{len(result.text)} characters", kind="tool")
            return result
        except ToolRefused as exc:
            failure = "no files" if str(exc).startswith("no files") else f"malformed tool call: {name}: {exc}"
            return ToolResult(f"error: {exc}", failure=failure)
        except SpecError as exc:
            return ToolResult(f"error: invalid solution: {exc}", failure=f"invalid solution: {exc}")

    async def build(self) -> ToolResult:
        solution = self._solution()
        definition = self.bench.problem.definition
        # Syntax, and an entry point that exists with the arity the evaluator calls (core.fleet.checks).
        errors = static_faults(solution, tuple(definition.inputs), tuple(definition.outputs))
        if errors:
            return ToolResult("build failed:\n" + "\n".join(errors), failure="compile error")
        prepared = await self.bench.build(solution)
        if not prepared.ok:
            return ToolResult("build failed:\n" + (prepared.errors or prepared.log[-3000:] or "(no output)"),
                              failure="compile error")
        resources = list(getattr(prepared.build, "resources", None) or []) if prepared.build is not None else []
        if not resources:
            return ToolResult(f"built ({prepared.kind.value}: nothing to compile)" if not solution.spec.is_cpp
                              else "built")
        lines = ["built; ptxas per kernel: registers, spill stores/loads, shared bytes, stack bytes"]
        for r in resources:
            lines.append(f"{r.name}: {r.registers} regs, spills {r.spill_stores}/{r.spill_loads}, "
                         f"smem {r.shared_bytes}, stack {r.stack_bytes}")
        return ToolResult("\n".join(lines))

    async def evaluate(self, workloads: Any, *, note: str = "") -> ToolResult:
        indices = self._workloads(workloads)
        solution = self._solution()
        earlier = self.bench.equal_attempt(solution, indices)
        if earlier is not None:
            self.parent_id = earlier.id
            return ToolResult(f"equals attempt {earlier.id}: {verdict_line(earlier)}\n(not evaluated again: change "
                              "the candidate to get a new result)", equal_to=earlier)
        attempt = await self.bench.evaluate(solution, workloads=indices, parent_id=self.parent_id, note=note)
        self.parent_id = attempt.id
        axes = {w.index: " ".join(f"{k}={v}" for k, v in w.axes.items()) for w in self.bench.problem.workloads}
        bests = workload_bests([a for a in self.bench.attempts() if a.id != attempt.id])
        return ToolResult(progress_table(attempt, self.bench.row().workloads, axes, bests), attempt=attempt)

    async def finish(self, note: str) -> ToolResult:
        """A full evaluation, then the turn ends; a candidate equal to a fully evaluated attempt just ends it."""
        result = await self.evaluate(None, note=note)
        result.finished = True
        if result.equal_to is not None:
            result.text = f"equals attempt {result.equal_to.id}: {verdict_line(result.equal_to)}\nturn ended"
        return result

    def _workloads(self, workloads: Any) -> tuple[int, ...] | None:
        """The requested workload indices, None for every workload; WorkspaceError for a bad request."""
        if workloads in (None, []):
            return None
        if not isinstance(workloads, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                       for i in workloads):
            raise WorkspaceError("workloads must be a list of workload indices")
        valid = {w.index for w in self.bench.problem.workloads if w.runnable}
        bad = [i for i in workloads if i not in valid]
        if bad:
            raise WorkspaceError(f"no runnable workload {bad}; valid: {sorted(valid)}")
        indices = tuple(dict.fromkeys(workloads))
        return None if len(indices) == len(valid) else indices


@functools.cache
def builtin_tools() -> dict[str, Tool]:
    """The workspace's tools and those of the other built-in tool modules, by name."""
    from core.llm.docs_tool import TOOLS as DOCS_TOOLS
    from core.llm.inspect_tools import TOOLS as INSPECT_TOOLS
    from core.llm.knowledge import TOOLS as KNOWLEDGE_TOOLS

    groups = [WORKSPACE_TOOLS, INSPECT_TOOLS, DOCS_TOOLS, KNOWLEDGE_TOOLS]
    return {tool.name: tool for group in groups for tool in group}


def registry() -> dict[str, Tool]:
    """Every tool the agent offers, by name: the built-in ones and those registered (``core.llm.toolkit.register``)."""
    return {**builtin_tools(), **registered()}


def tool_schemas() -> list[dict[str, Any]]:
    return [tool.schema() for tool in registry().values()]


_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_PATH = re.compile(r"""(?:^|\s)(?:path|file|filename)\s*[=:]\s*["']?([^\s"']+)["']?""")
_FINISH = re.compile(r"^\s*FINISH\s*:?\s*(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class TextReply:
    files: tuple[tuple[str, str], ...]  # (path, content) in order
    blocks: int  # fenced blocks seen, with a path or not
    finish_note: str | None  # the note of a FINISH line, if there is one
    diffs: tuple[tuple[str, str], ...] = ()  # (path, unified diff) of the ```diff blocks, in order

    @property
    def changes(self) -> bool:
        return bool(self.files or self.diffs)


def parse_text_reply(text: str) -> TextReply:
    """Files in fenced blocks whose info string carries ``path=...`` (a block whose language is ``diff`` is a unified
    diff of that file, for ``edit_file``); a ``FINISH: note`` line ends the turn."""
    files, diffs = [], []
    blocks = 0
    for match in _FENCE.finditer(text or ""):
        blocks += 1
        found = _PATH.search(match.group(1))
        if found:
            is_diff = match.group(1).split(maxsplit=1)[:1] == ["diff"]
            (diffs if is_diff else files).append((found.group(1), match.group(2)))
    finish = _FINISH.search(_FENCE.sub("", text or ""))
    return TextReply(tuple(files), blocks, finish.group(1).strip() if finish else None, tuple(diffs))
