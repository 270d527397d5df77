"""Read queries shared by the writer (the orchestrator) and readers in other processes (the UI, reports)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from core.store import model


@dataclass(frozen=True)
class AttemptHead:
    """What recording an attempt's result needs of it (``Queries.attempt_head``)."""

    id: int
    problem_id: int
    agent_id: int | None
    state: str
    full: bool
    note: str


def passing_entry(attempt_id: int, times_json: str | None, full: int | bool, speedup: float | None,
                  parents_json: str | None, scale: dict[int, float] | None,
                  spreads: dict[int, float]) -> model.PassingTimes:
    """A passing attempt as ``Queries.passing_times`` gives it, from its columns; ``scale``: workload -> the
    factor that brings a time measured on its GPU model to the problem's ``baseline_model`` (None: measured there)."""
    times = {int(k): v for k, v in json.loads(times_json or "{}").items()}
    if scale is not None:
        times = {i: ms * scale[i] for i, ms in times.items() if i in scale}
    return model.PassingTimes(attempt_id, times, bool(full), speedup, len(json.loads(parents_json or "[]")) > 1,
                              spreads)


def verdict_spreads(verdict: dict | None) -> dict[int, float]:
    """Workload index -> the timing's relative spread, from a verdict dict as the store's JSON holds it (what
    ``Queries.passing_times`` reads with ``json_each``)."""
    workloads = verdict.get("workloads") if isinstance(verdict, dict) else None
    if isinstance(workloads, dict):
        workloads = list(workloads.values())
    spreads: dict[int, float] = {}
    for w in workloads if isinstance(workloads, list) else ():
        if not isinstance(w, dict):
            continue
        index, timing = w.get("index"), w.get("timing")
        spread = timing.get("spread") if isinstance(timing, dict) else None
        if isinstance(index, (int, float)) and isinstance(spread, (int, float)):
            spreads[int(index)] = float(spread)
    return spreads


class Queries:
    conn: sqlite3.Connection

    def run_info(self) -> model.RunInfo | None:
        row = self.conn.execute("SELECT * FROM run WHERE id = 1").fetchone()
        return model.run_from_row(row) if row else None

    def problems(self) -> list[model.ProblemRow]:
        return [model.problem_from_row(r) for r in self.conn.execute("SELECT * FROM problems ORDER BY id")]

    def problem(self, problem_id: int) -> model.ProblemRow | None:
        row = self.conn.execute("SELECT * FROM problems WHERE id = ?", (problem_id,)).fetchone()
        return model.problem_from_row(row) if row else None

    def problem_by_key(self, key: str) -> model.ProblemRow | None:
        row = self.conn.execute("SELECT * FROM problems WHERE key = ?", (key,)).fetchone()
        return model.problem_from_row(row) if row else None

    def agents(self) -> list[model.AgentRow]:
        return [model.agent_from_row(r) for r in self.conn.execute("SELECT * FROM agents ORDER BY id")]

    def agent(self, agent_id: int) -> model.AgentRow | None:
        row = self.conn.execute("SELECT * FROM agents WHERE id = ?", (agent_id,)).fetchone()
        return model.agent_from_row(row) if row else None

    def attempt(self, attempt_id: int) -> model.AttemptRow | None:
        row = self.conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        return model.attempt_from_row(row) if row else None

    def attempt_head(self, attempt_id: int) -> AttemptHead | None:
        """An attempt's state and who made it for what, without decoding its solution or verdict."""
        row = self.conn.execute("SELECT id, problem_id, agent_id, state, full, note FROM attempts WHERE id = ?",
                                (attempt_id,)).fetchone()
        return AttemptHead(row["id"], row["problem_id"], row["agent_id"], row["state"], bool(row["full"]),
                           row["note"]) if row else None

    def attempts(self, problem_id: int | None = None, agent_id: int | None = None, *, state: str | None = None,
                 since_id: int = 0, limit: int | None = None) -> list[model.AttemptRow]:
        """Attempts in the order they were made (newest last), optionally filtered."""
        where, args = ["id > ?"], [since_id]
        for column, value in (("problem_id", problem_id), ("agent_id", agent_id), ("state", state)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT * FROM attempts WHERE {' AND '.join(where)} ORDER BY id"
        if limit is not None:
            sql = f"SELECT * FROM ({sql.replace('ORDER BY id', 'ORDER BY id DESC')} LIMIT {int(limit)}) ORDER BY id"
        return [model.attempt_from_row(r) for r in self.conn.execute(sql, args)]

    def attempt_count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM attempts WHERE state = 'done'").fetchone()[0]

    def events(self, *, agent_id: int | None = None, problem_id: int | None = None, kind: str | None = None,
               since_id: int = 0, limit: int = 500) -> list[model.EventRow]:
        """The newest ``limit`` events after ``since_id`` (oldest first)."""
        where, args = ["id > ?"], [since_id]
        for column, value in (("agent_id", agent_id), ("problem_id", problem_id), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        rows = self.conn.execute(f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
                                 [*args, int(limit)]).fetchall()
        return [model.event_from_row(r) for r in reversed(rows)]

    def events_addressed(self, kind: str, agent_id: int, problem_id: int, *, since_id: int = 0,
                         limit: int = 500) -> list[model.EventRow]:
        """The newest ``limit`` events of ``kind`` after ``since_id`` (oldest first) addressed to agent ``agent_id``,
        or to no agent and problem ``problem_id`` (the planner model's directives, ``core.fleet.directives``)."""
        rows = self.conn.execute(
            "SELECT * FROM events WHERE kind = ? AND id > ? AND (agent_id = ? OR (agent_id IS NULL AND "
            "problem_id = ?)) ORDER BY id DESC LIMIT ?", (kind, since_id, agent_id, problem_id, int(limit))).fetchall()
        return [model.event_from_row(r) for r in reversed(rows)]

    def languages_tried(self) -> dict[int, list[tuple[str, int, int]]]:
        """Problem id -> (language, finished attempts, passing ones) of its attempts, the most tried first."""
        tried: dict[int, list[tuple[str, int, int]]] = {}
        for r in self.conn.execute(
                "SELECT problem_id, language, COUNT(*) AS n, SUM(status = 'PASSED') AS passing FROM attempts WHERE "
                "state = 'done' GROUP BY problem_id, language ORDER BY problem_id, n DESC, language"):
            tried.setdefault(r["problem_id"], []).append((r["language"], r["n"], r["passing"] or 0))
        return tried

    def newest_failures(self, per_problem: int) -> dict[int, list[tuple[int, str, str]]]:
        """Problem id -> its newest ``per_problem`` finished attempts that did not pass: (id, status, reason),
        newest first."""
        failures: dict[int, list[tuple[int, str, str]]] = {}
        for r in self.conn.execute(
                "SELECT id, problem_id, status, reason FROM (SELECT id, problem_id, status, reason, ROW_NUMBER() OVER "
                "(PARTITION BY problem_id ORDER BY id DESC) AS k FROM attempts WHERE state = 'done' AND status IS NOT "
                "NULL AND status != 'PASSED') WHERE k <= ? ORDER BY problem_id, id DESC", (int(per_problem),)):
            failures.setdefault(r["problem_id"], []).append((r["id"], r["status"], r["reason"]))
        return failures

    def last_event_id(self) -> int:
        """The id of the newest event (0 before any)."""
        return self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]

    def lifecycle_events(self, since_id: int = 0) -> list[model.EventRow]:
        """The events after ``since_id`` that tell the run's course (oldest first): its starts, resumes and ends
        (kind "run"), the controls applied, and the log lines of the bests' re-verification (``core.fleet.verify``:
        "re-verifying the best attempt of N problems ...", then "best attempt ID re-verified ..." or "... failed
        re-verification ...", each with its problem)."""
        return [model.event_from_row(r) for r in self.conn.execute(
            "SELECT * FROM events WHERE id > ? AND (kind IN ('run', 'control') OR (kind = 'log' AND "
            "(message LIKE 're-verif%' OR message LIKE 'best attempt %'))) ORDER BY id", (since_id,))]

    def controls(self, *, pending_only: bool = False) -> list[model.ControlRow]:
        sql = "SELECT * FROM controls" + (" WHERE applied_at IS NULL" if pending_only else "") + " ORDER BY id"
        return [model.control_from_row(r) for r in self.conn.execute(sql)]

    def metrics(self, since_ts: float = 0.0) -> list[model.MetricRow]:
        return [model.metric_from_row(r) for r in
                self.conn.execute("SELECT * FROM metrics WHERE ts > ? ORDER BY id", (since_ts,))]

    def attempts_begun(self, problem_id: int | None = None) -> int:
        """Attempts recorded, finished or pending (what an attempt budget counts before one more evaluation)."""
        if problem_id is None:
            return self.conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        return self.conn.execute("SELECT COUNT(*) FROM attempts WHERE problem_id = ?", (problem_id,)).fetchone()[0]

    def attempts_with_content(self, problem_id: int, content_hash: str) -> list[model.AttemptRow]:
        """The problem's finished attempts whose candidate has this content hash (oldest first)."""
        return [model.attempt_from_row(r) for r in self.conn.execute(
            "SELECT * FROM attempts WHERE problem_id = ? AND content_hash = ? AND state = 'done' ORDER BY id",
            (problem_id, content_hash))]

    def model_workloads(self, problem_id: int, device_model: str) -> tuple[model.WorkloadInfo, ...] | None:
        """The problem's T_b and T_sol on ``device_model`` when that is not its ``baseline_model``; None until
        measured."""
        row = self.conn.execute("SELECT workloads_json FROM model_baselines WHERE problem_id = ? AND device_model = ?",
                                (problem_id, device_model)).fetchone()
        return tuple(model.WorkloadInfo(**w) for w in json.loads(row[0])) if row else None

    def passing_times(self, problem_id: int) -> list[model.PassingTimes]:
        """The problem's finished PASSED attempts, oldest first, with only what a frontier needs (no verdicts or
        sources are read). A time measured on another GPU model than the problem's ``baseline_model`` is scaled by
        the ratio of the two models' T_b on that workload, so that times of one problem compare across models."""
        spreads: dict[int, dict[int, float]] = {}
        for r in self.conn.execute(
                "SELECT a.id, json_extract(w.value, '$.index') AS idx, json_extract(w.value, '$.timing.spread') AS "
                "spread FROM attempts a, json_each(a.verdict_json, '$.workloads') w WHERE a.problem_id = ? AND "
                "a.state = 'done' AND a.status = 'PASSED' AND json_valid(a.verdict_json)", (problem_id,)):
            if r["idx"] is not None and isinstance(r["spread"], (int, float)):
                spreads.setdefault(r["id"], {})[int(r["idx"])] = float(r["spread"])
        scales = self._time_scales(problem_id)
        return [passing_entry(r["id"], r["times_json"], r["full"], r["speedup"], r["parents_json"],
                              scales.get(r["device_model"]), spreads.get(r["id"], {}))
                for r in self.conn.execute(
                    "SELECT id, times_json, full, speedup, parents_json, device_model FROM attempts WHERE "
                    "problem_id = ? AND state = 'done' AND status = 'PASSED' ORDER BY id", (problem_id,))]

    def _time_scales(self, problem_id: int) -> dict[str, dict[int, float]]:
        """GPU model -> workload -> T_b(baseline_model) / T_b(that model), for the models measured apart."""
        problem = self.problem(problem_id)
        if problem is None:
            return {}
        primary = {w.index: w.t_b_ms for w in problem.workloads if w.t_b_ms}
        scales: dict[str, dict[int, float]] = {}
        for r in self.conn.execute("SELECT device_model, workloads_json FROM model_baselines WHERE problem_id = ?",
                                   (problem_id,)):
            scales[r["device_model"]] = {w["index"]: primary[w["index"]] / w["t_b_ms"] for w in json.loads(
                r["workloads_json"]) if w.get("t_b_ms") and w["index"] in primary}
        return scales

    def notes(self, family: str | None = None, *, limit: int = 20) -> list[model.NoteRow]:
        """The newest ``limit`` notes (of one op family, if given), oldest first, with who wrote them where."""
        where, args = ("WHERE n.family = ?", [family]) if family is not None else ("", [])
        rows = self.conn.execute(
            "SELECT n.*, a.name AS agent_name, p.key AS problem_key FROM notes n LEFT JOIN agents a ON a.id = "
            f"n.agent_id LEFT JOIN problems p ON p.id = n.problem_id {where} ORDER BY n.id DESC LIMIT ?",
            [*args, int(limit)]).fetchall()
        return [model.note_from_row(r) for r in reversed(rows)]

    def llm_calls(self, *, agent_id: int | None = None, problem_id: int | None = None, since_id: int = 0,
                  limit: int | None = None) -> list[model.LlmCallRow]:
        """Model calls in the order they returned (the newest ``limit`` of them, oldest first)."""
        where, args = ["id > ?"], [since_id]
        for column, value in (("agent_id", agent_id), ("problem_id", problem_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT * FROM llm_calls WHERE {' AND '.join(where)} ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [model.llm_call_from_row(r) for r in reversed(self.conn.execute(sql, args).fetchall())]

    def profile_usage(self) -> dict[str, model.ProfileUsage]:
        """By model profile: the finished attempts its agents made while on it and the model calls it answered or
        failed, with the gain, GPU seconds and dollars they count (attempts and calls of no profile left out)."""
        usage: dict[str, model.ProfileUsage] = {}
        for r in self.conn.execute("SELECT profile, COUNT(*) AS n, COALESCE(SUM(gain), 0) AS gain, "
                                   "COALESCE(SUM(gpu_seconds), 0) AS gpu FROM attempts WHERE state = 'done' AND "
                                   "profile != '' GROUP BY profile"):
            usage[r["profile"]] = model.ProfileUsage(r["profile"], r["n"], r["gain"], r["gpu"])
        for r in self.conn.execute("SELECT profile, COUNT(*) AS n, COALESCE(SUM(dollars), 0) AS usd FROM llm_calls "
                                   "WHERE profile != '' GROUP BY profile"):
            had = usage.get(r["profile"], model.ProfileUsage(r["profile"]))
            usage[r["profile"]] = model.ProfileUsage(had.profile, had.attempts, had.sol_gain, had.gpu_seconds,
                                                     r["n"], r["usd"])
        return usage

    def device_usage(self) -> list[model.DeviceUsage]:
        """By device (node, GPU, model): the finished attempts evaluated there and their GPU seconds; attempts
        decided before any evaluation (no node) left out."""
        return [model.DeviceUsage(r["node"], r["gpu"], r["device_model"], r["n"], r["gpu_s"]) for r in
                self.conn.execute("SELECT node, gpu, device_model, COUNT(*) AS n, COALESCE(SUM(gpu_seconds), 0) "
                                  "AS gpu_s FROM attempts WHERE state = 'done' AND node != '' GROUP BY node, gpu, "
                                  "device_model ORDER BY node, gpu")]

    def llm_spent(self) -> tuple[int, float]:
        """(tokens, dollars) of every model call of the run."""
        row = self.conn.execute("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), "
                                "COALESCE(SUM(dollars), 0) FROM llm_calls").fetchone()
        return int(row[0]), float(row[1])

    def llm_usage(self) -> model.LlmUsage:
        """Every model call of the run summed: tokens (cached and reasoning among them) and dollars."""
        r = self.conn.execute(
            "SELECT COUNT(*) AS n, COALESCE(SUM(prompt_tokens), 0) AS p, COALESCE(SUM(completion_tokens), 0) AS c, "
            "COALESCE(SUM(cached_tokens), 0) AS ct, COALESCE(SUM(reasoning_tokens), 0) AS rt, "
            "COALESCE(SUM(dollars), 0) AS usd, COALESCE(SUM(cached_dollars), 0) AS cusd, "
            "COALESCE(SUM(reasoning_dollars), 0) AS rusd, COALESCE(MAX(tokens_estimated), 0) AS est "
            "FROM llm_calls").fetchone()
        return model.LlmUsage(r["n"], r["p"], r["c"], r["ct"], r["rt"], r["usd"], r["cusd"], r["rusd"], bool(r["est"]))

    def totals(self) -> dict[str, float]:
        """Finished attempts and their GPU seconds; tokens and dollars of every model call, whatever it led to."""
        row = self.conn.execute("SELECT COUNT(*) AS n, COALESCE(SUM(gpu_seconds), 0) AS gpu "
                                "FROM attempts WHERE state = 'done'").fetchone()
        tokens, dollars = self.llm_spent()
        return {"attempts": row["n"], "tokens": tokens, "dollars": dollars, "gpu_seconds": row["gpu"]}
