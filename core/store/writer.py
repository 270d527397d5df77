"""The run's one writer: the orchestrator owns this connection. Every call commits, so a kill at any moment leaves
the file consistent at the last completed call."""

from __future__ import annotations

import json
import sqlite3
import time
from bisect import insort
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.store import model
from core.store.check import NotARunStore, check_store_file, reason
from core.store.queries import Queries, passing_entry, verdict_spreads
from core.store.schema import DB_NAME, migrate

_PROBLEM_FIELDS = {"op", "priority", "paused", "pinned", "status", "best_attempt_id", "best_speedup", "best_sol",
                   "seed_attempt_id", "seed_speedup", "seed_sol", "attempts", "failures_in_row", "since_improvement",
                   "tokens", "dollars", "gpu_seconds", "wall_seconds", "last_change_at", "preparation_s"}
MAX_NOTE_CHARS = 500
CACHED_ATTEMPTS = 4096  # finished attempts kept decoded in memory (the oldest read is dropped first)
_AGENT_FIELDS = {"state", "problem_id", "paused", "attempts", "failures_in_row", "tokens", "dollars", "model",
                 "profile"}


class StoreError(Exception):
    pass


class RunStore(Queries):
    def __init__(self, run_dir: str | Path, *, create: bool = False):
        self.run_dir = Path(run_dir)
        path = self.run_dir / DB_NAME
        if not create:
            try:
                check_store_file(path)  # before anything could write to it
            except NotARunStore as exc:
                raise StoreError(str(exc)) from None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA user_version").fetchone()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{path}: cannot create the run store ({reason(exc)})") from None
        self.conn.row_factory = sqlite3.Row
        self._identity = _file_identity(path)  # the file this connection writes, to notice it deleted or replaced
        # Every text written passes through this (the run sets core.secrets.redact): a secret that reached a
        # candidate's output, a log line or an answer is never stored.
        self.redact: Callable[[str], str] = lambda text: text
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints, never corrupt
        self.conn.execute("PRAGMA foreign_keys = ON")
        try:
            migrate(self.conn)
        except ValueError as exc:
            self.conn.close()
            raise StoreError(f"{run_dir}: {exc}") from None
        # The one writer knows every change to problems and agents (other processes only add controls), so it
        # keeps their rows in memory and re-reads only the ones it changed: a planner tick over 1,000 problems
        # then costs a few rows, not a table scan into dataclasses.
        self._problems: dict[int, model.ProblemRow] | None = None
        self._agents: dict[int, model.AgentRow] | None = None
        self._dirty_problems: set[int] = set()
        self._dirty_agents: set[int] = set()
        # Finished attempts as read (decoded once: a best or a parent is read for every trial), and each problem's
        # passing times for its frontier, extended by finish_attempt rather than read again after every attempt.
        self._done_attempts: dict[int, model.AttemptRow] = {}
        self._passing: dict[int, list[model.PassingTimes]] = {}
        self._scales: dict[int, dict[str, dict[int, float]]] = {}

    def problems(self) -> list[model.ProblemRow]:
        if self._problems is None:
            self._problems = {r.id: r for r in super().problems()}
            self._dirty_problems.clear()
        for problem_id in self._dirty_problems:
            row = super().problem(problem_id)
            if row is not None:
                self._problems[problem_id] = row
        self._dirty_problems.clear()
        return list(self._problems.values())

    def problem(self, problem_id: int) -> model.ProblemRow | None:
        """From the rows kept in memory (re-read only after this writer changed it): called several times per
        attempt."""
        if self._problems is None:
            self.problems()
        if problem_id in self._dirty_problems or problem_id not in self._problems:
            row = super().problem(problem_id)
            self._dirty_problems.discard(problem_id)
            if row is None:
                self._problems.pop(problem_id, None)
                return None
            self._problems[problem_id] = row
        return self._problems[problem_id]

    def agents(self) -> list[model.AgentRow]:
        if self._agents is None:
            self._agents = {r.id: r for r in super().agents()}
            self._dirty_agents.clear()
        for agent_id in self._dirty_agents:
            row = super().agent(agent_id)
            if row is not None:
                self._agents[agent_id] = row
        self._dirty_agents.clear()
        return list(self._agents.values())

    def attempt(self, attempt_id: int) -> model.AttemptRow | None:
        """A finished attempt from memory once read (only this writer changes one, and it forgets it then); a
        pending one from the store."""
        row = self._done_attempts.get(attempt_id)
        if row is None:
            row = super().attempt(attempt_id)
            if row is not None and row.state == "done":
                self._remember_attempt(row)
        return row

    def _remember_attempt(self, row: model.AttemptRow) -> model.AttemptRow:
        if len(self._done_attempts) >= CACHED_ATTEMPTS:
            del self._done_attempts[next(iter(self._done_attempts))]
        self._done_attempts[row.id] = row
        return row

    def passing_times(self, problem_id: int) -> list[model.PassingTimes]:
        """As ``Queries.passing_times``; read once per problem, then extended by ``finish_attempt``."""
        times = self._passing.get(problem_id)
        if times is None:
            times = self._passing[problem_id] = super().passing_times(problem_id)
        return list(times)

    def _time_scales(self, problem_id: int) -> dict[str, dict[int, float]]:
        scales = self._scales.get(problem_id)
        if scales is None:
            scales = self._scales[problem_id] = super()._time_scales(problem_id)
        return scales

    def _forget_times(self, problem_id: int) -> None:
        """The problem's T_b changed on some GPU model, so the scaled passing times must be read again."""
        self._passing.pop(problem_id, None)
        self._scales.pop(problem_id, None)

    def _forget_cached_rows(self) -> None:
        self._problems = self._agents = None
        self._done_attempts.clear()
        self._passing.clear()
        self._scales.clear()

    def close(self) -> None:
        self.conn.close()

    def still_in_place(self) -> bool:
        """Whether RUN_DIR/run.sqlite is still the file this connection writes: SQLite keeps writing a deleted or
        replaced file through its open descriptor, where nothing would ever read it again."""
        return _file_identity(self.run_dir / DB_NAME) == self._identity

    def write_back(self) -> Path:
        """Write the whole store, as this connection sees it, to RUN_DIR/run.sqlite again (the folder made anew
        if it was deleted): what a run recorded outlives the deletion of its folder. The path written; OSError or
        sqlite3.Error when it cannot be."""
        path = self.run_dir / DB_NAME
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if path.exists():  # replaced by another file: keep it, write beside it
            path = self.run_dir / f"{DB_NAME}.recovered-{int(time.time())}"
        target = sqlite3.connect(path)
        try:
            self.conn.backup(target)
        finally:
            target.close()
        return path

    def _insert(self, table: str, values: dict[str, Any]) -> int:
        values = {k: self.redact(v) if isinstance(v, str) else v for k, v in values.items()}
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        return int(self.conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})",
                                     list(values.values())).lastrowid)

    def _update(self, table: str, row_id: int, fields: dict[str, Any], allowed: set[str]) -> None:
        unknown = set(fields) - allowed
        if unknown:
            raise StoreError(f"{table}: no such field(s) {', '.join(sorted(unknown))}")
        if fields:
            fields = {k: self.redact(v) if isinstance(v, str) else v for k, v in fields.items()}
            sets = ", ".join(f"{k} = ?" for k in fields)
            self.conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*fields.values(), row_id])

    # ---------------------------------------------------------------- the run

    def init_run(self, config: dict[str, Any], problem_paths: list[str], device: str, gpus: list[int],
                 gpu_name: str = "") -> None:
        self.conn.execute("INSERT INTO run (id, created_at, config_json, problem_paths_json, device, gpus_json, "
                          "gpu_name, state) VALUES (1, ?, ?, ?, ?, ?, ?, 'starting')",
                          (time.time(), json.dumps(config), json.dumps(problem_paths), device, json.dumps(gpus),
                           gpu_name))

    def set_run_state(self, state: str, owner: str | None = None) -> None:
        """``owner``: the "host:pid" of the process now running the run (kept when None)."""
        ended = time.time() if state in ("stopped", "finished") else None
        self.conn.execute("UPDATE run SET state = ?, ended_at = ?, owner = COALESCE(?, owner) WHERE id = 1",
                          (state, ended, owner))

    # ---------------------------------------------------------------- problems and agents

    def add_problem(self, key: str, name: str, subset: str, path: str, op: str = "",
                    workloads: list[dict[str, Any]] | None = None) -> int:
        row = self.conn.execute("SELECT id FROM problems WHERE key = ?", (key,)).fetchone()
        if row:
            return int(row["id"])
        self._problems = None
        return self._insert("problems", {"key": key, "name": name, "subset": subset, "path": path, "op": op,
                                         "workloads_json": json.dumps(workloads or [])})

    def set_problem_workloads(self, problem_id: int, workloads: list[dict[str, Any]], device_model: str = "") -> None:
        """The problem's T_b and T_sol per workload (``WorkloadInfo`` dicts), measured on ``device_model``."""
        self._dirty_problems.add(problem_id)
        self._forget_times(problem_id)
        self.conn.execute("UPDATE problems SET workloads_json = ?, baseline_model = ? WHERE id = ?",
                          (json.dumps(workloads), device_model, problem_id))

    def set_model_workloads(self, problem_id: int, device_model: str, workloads: list[dict[str, Any]]) -> None:
        """T_b and T_sol per workload on another GPU model than the problem's ``baseline_model``."""
        self._forget_times(problem_id)
        self.conn.execute("INSERT OR REPLACE INTO model_baselines (problem_id, device_model, workloads_json) "
                          "VALUES (?, ?, ?)", (problem_id, device_model, json.dumps(workloads)))

    def set_attempt_verified(self, attempt_id: int, outcome: str) -> None:
        """What re-verifying a best attempt with upstream's full rules gave (``core.fleet.verify``)."""
        self._done_attempts.pop(attempt_id, None)
        self.conn.execute("UPDATE attempts SET verified = ? WHERE id = ?", (self.redact(outcome), attempt_id))

    def set_problem_frontier(self, problem_id: int, members: list[dict[str, Any]]) -> None:
        """Replace the problem's frontier (``core.store.model.frontier_member_to_dict`` of each member)."""
        self._dirty_problems.add(problem_id)
        self.conn.execute("UPDATE problems SET frontier_json = ? WHERE id = ?", (json.dumps(members), problem_id))

    def update_problem(self, problem_id: int, **fields: Any) -> None:
        self._dirty_problems.add(problem_id)
        self._update("problems", problem_id, fields, _PROBLEM_FIELDS)

    def add_agent(self, name: str, kind: str, model: str = "", profile: str = "") -> int:
        """A new agent's id; an agent of that name already there keeps its row (its model and profile too)."""
        row = self.conn.execute("SELECT id FROM agents WHERE name = ?", (name,)).fetchone()
        if row:
            return int(row["id"])
        self._agents = None
        return self._insert("agents", {"name": name, "kind": kind, "model": model, "profile": profile,
                                       "updated_at": time.time()})

    def update_agent(self, agent_id: int, **fields: Any) -> None:
        self._dirty_agents.add(agent_id)
        self._update("agents", agent_id, {**fields}, _AGENT_FIELDS)
        self.conn.execute("UPDATE agents SET updated_at = ? WHERE id = ?", (time.time(), agent_id))

    # ---------------------------------------------------------------- attempts

    def begin_attempt(self, problem_id: int, agent_id: int | None, solution: dict[str, Any], *, language: str,
                      parent_id: int | None = None, diff: str = "", tunables: dict[str, Any] | None = None,
                      note: str = "", workloads: list[int] | None = None, content_hash: str = "",
                      parents: list[int] | None = None, profile: str = "") -> int:
        """Record a candidate before it is evaluated, so a crash mid-evaluation leaves it to be re-evaluated.
        ``parents`` defaults to ``[parent_id]``; a composite names every member, its first one as ``parent_id``."""
        if parents is None:
            parents = [parent_id] if parent_id is not None else []
        return self._insert("attempts", {
            "problem_id": problem_id, "agent_id": agent_id, "parent_id": parent_id, "state": "pending",
            "created_at": time.time(), "language": language, "solution_json": json.dumps(solution), "diff": diff,
            "tunables_json": json.dumps(tunables or {}), "note": note,
            "workloads_json": json.dumps(workloads) if workloads is not None else None,
            "full": 1 if workloads is None else 0, "content_hash": content_hash, "parents_json": json.dumps(parents),
            "profile": profile})

    def finish_attempt(self, attempt_id: int, *, status: str, reason: str = "", verdict: dict[str, Any] | None = None,
                       build: dict[str, Any] | None = None, times_ms: dict[int, float] | None = None,
                       speedup: float | None = None, sol: float | None = None, gpu_seconds: float = 0.0,
                       node: str = "", gpu: int | None = None, device_model: str = "") -> bool:
        """Complete a pending attempt; False (and nothing written) if it was already complete. The finished row,
        as written, is kept in memory for the reads that follow (the result's own, then as a best or a parent)."""
        self._done_attempts.pop(attempt_id, None)
        rows = self.conn.execute(
            "UPDATE attempts SET state = 'done', finished_at = ?, status = ?, reason = ?, verdict_json = ?, "
            "build_json = ?, times_json = ?, speedup = ?, sol = ?, gpu_seconds = ?, node = ?, gpu = ?, "
            "device_model = ? WHERE id = ? AND state = 'pending' RETURNING *",
            (time.time(), status, self.redact(reason[:2000]),
             self.redact(json.dumps(verdict)) if verdict is not None else None,
             self.redact(json.dumps(build)) if build is not None else None,
             json.dumps({str(k): v for k, v in (times_ms or {}).items()}),
             speedup, sol, gpu_seconds, node, gpu, device_model, attempt_id)).fetchall()
        if not rows:
            return False
        row = rows[0]
        finished = self._remember_attempt(model.attempt_from_row(row))
        if finished.passed and finished.problem_id in self._passing:
            entry = passing_entry(attempt_id, row["times_json"], row["full"], finished.speedup, row["parents_json"],
                                  self._time_scales(finished.problem_id).get(finished.device_model),
                                  verdict_spreads(finished.verdict))
            insort(self._passing[finished.problem_id], entry, key=lambda t: t.attempt_id)
        return True

    def set_attempt_gain(self, attempt_id: int, gain: float) -> None:
        kept = self._done_attempts.get(attempt_id)
        if kept is not None:
            self._done_attempts[attempt_id] = replace(kept, gain=gain)
        self.conn.execute("UPDATE attempts SET gain = ? WHERE id = ?", (gain, attempt_id))

    def transaction(self):
        """``with store.transaction():`` groups several writes into one commit."""
        return _Transaction(self.conn, self._forget_cached_rows)

    # ---------------------------------------------------------------- model calls

    def add_llm_call(self, agent_id: int | None, problem_id: int | None, call: model.LlmCall, *, profile: str = "",
                     model: str = "") -> int:
        """Record one model call (to ``model`` of ``profile``) and add its tokens and dollars to its problem's and
        agent's totals, in one transaction: the totals are live, survive a resume and never count a call twice."""
        with self.transaction():
            call_id = self._insert("llm_calls", {
                "ts": time.time(), "agent_id": agent_id, "problem_id": problem_id, "profile": profile, "model": model,
                "prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
                "tokens_estimated": int(call.tokens_estimated), "dollars": call.dollars, "latency_s": call.latency_s,
                "outcome": call.outcome, "detail": call.detail[:300], "cached_tokens": call.cached_tokens,
                "reasoning_tokens": call.reasoning_tokens, "cached_dollars": call.cached_dollars,
                "reasoning_dollars": call.reasoning_dollars})
            if call.tokens or call.dollars:
                for table, row_id, dirty in (("problems", problem_id, self._dirty_problems),
                                             ("agents", agent_id, self._dirty_agents)):
                    if row_id is not None:
                        dirty.add(row_id)
                        self.conn.execute(f"UPDATE {table} SET tokens = tokens + ?, dollars = dollars + ? "
                                          "WHERE id = ?", (call.tokens, call.dollars, row_id))
        return call_id

    # ---------------------------------------------------------------- the notes board

    def add_note(self, family: str, text: str, *, agent_id: int | None = None, problem_id: int | None = None) -> int:
        """Record a short finding on ``family``'s board (cut to MAX_NOTE_CHARS)."""
        return self._insert("notes", {"ts": time.time(), "family": family, "agent_id": agent_id,
                                      "problem_id": problem_id, "text": text[:MAX_NOTE_CHARS]})

    # ---------------------------------------------------------------- events, controls, metrics

    def add_event(self, kind: str, message: str, *, agent_id: int | None = None,
                  problem_id: int | None = None) -> int:
        return self._insert("events", {"ts": time.time(), "kind": kind, "agent_id": agent_id,
                                       "problem_id": problem_id, "message": message})

    def mark_control_applied(self, control_id: int, result: str) -> None:
        self.conn.execute("UPDATE controls SET applied_at = ?, result = ? WHERE id = ?",
                          (time.time(), result, control_id))

    def add_metric(self, *, fleet_mean_sol: float | None, geomean_speedup: float | None, gpu_busy: float | None,
                   queue_wait_s: float | None, attempts: int, tokens: int, dollars: float, active_problems: int,
                   gpu_kernel: float | None = None, gpu_kernel_note: str = "",
                   gpu_held: dict[str, float] | None = None) -> None:
        self._insert("metrics", {"ts": time.time(), "fleet_mean_sol": fleet_mean_sol,
                                 "geomean_speedup": geomean_speedup, "gpu_busy": gpu_busy,
                                 "queue_wait_s": queue_wait_s, "attempts": attempts, "tokens": tokens,
                                 "dollars": dollars, "active_problems": active_problems, "gpu_kernel": gpu_kernel,
                                 "gpu_kernel_note": gpu_kernel_note, "gpu_held_json": json.dumps(gpu_held or {})})


class _Transaction:
    def __init__(self, conn: sqlite3.Connection, on_rollback):
        self.conn = conn
        self.on_rollback = on_rollback

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_) -> None:
        if exc_type:
            self.conn.execute("ROLLBACK")
            self.on_rollback()
        else:
            self.conn.execute("COMMIT")


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino
