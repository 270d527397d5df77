"""The store's tables, as numbered migrations applied in order (PRAGMA user_version holds the last applied)."""

from __future__ import annotations

import sqlite3

DB_NAME = "run.sqlite"

MIGRATIONS: tuple[str, ...] = (
    # 1: the first layout
    """
    CREATE TABLE run (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        created_at REAL NOT NULL,
        config_json TEXT NOT NULL,
        problem_paths_json TEXT NOT NULL,
        device TEXT NOT NULL,
        gpus_json TEXT NOT NULL,
        gpu_name TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        ended_at REAL
    );
    CREATE TABLE problems (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        subset TEXT NOT NULL,
        path TEXT NOT NULL,
        op TEXT NOT NULL DEFAULT '',
        priority INTEGER NOT NULL DEFAULT 0,
        paused INTEGER NOT NULL DEFAULT 0,
        pinned INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL DEFAULT 'waiting',
        best_attempt_id INTEGER,
        best_speedup REAL,
        best_sol REAL,
        seed_attempt_id INTEGER,
        seed_speedup REAL,
        seed_sol REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures_in_row INTEGER NOT NULL DEFAULT 0,
        since_improvement INTEGER NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        dollars REAL NOT NULL DEFAULT 0,
        gpu_seconds REAL NOT NULL DEFAULT 0,
        wall_seconds REAL NOT NULL DEFAULT 0,
        last_change_at REAL,
        workloads_json TEXT NOT NULL DEFAULT '[]'
    );
    CREATE TABLE agents (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        model TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT 'idle',
        problem_id INTEGER REFERENCES problems(id),
        paused INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures_in_row INTEGER NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        dollars REAL NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL DEFAULT 0
    );
    CREATE TABLE attempts (
        id INTEGER PRIMARY KEY,
        problem_id INTEGER NOT NULL REFERENCES problems(id),
        agent_id INTEGER REFERENCES agents(id),
        parent_id INTEGER REFERENCES attempts(id),
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL,
        language TEXT NOT NULL,
        solution_json TEXT NOT NULL,
        diff TEXT NOT NULL DEFAULT '',
        tunables_json TEXT NOT NULL DEFAULT '{}',
        note TEXT NOT NULL DEFAULT '',
        workloads_json TEXT,
        build_json TEXT,
        verdict_json TEXT,
        status TEXT,
        reason TEXT NOT NULL DEFAULT '',
        times_json TEXT NOT NULL DEFAULT '{}',
        speedup REAL,
        sol REAL,
        full INTEGER NOT NULL DEFAULT 1,
        tokens INTEGER NOT NULL DEFAULT 0,
        dollars REAL NOT NULL DEFAULT 0,
        gpu_seconds REAL NOT NULL DEFAULT 0
    );
    CREATE INDEX attempts_by_problem ON attempts(problem_id, id);
    CREATE INDEX attempts_by_agent ON attempts(agent_id, id);
    CREATE INDEX attempts_pending ON attempts(state) WHERE state = 'pending';
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        agent_id INTEGER,
        problem_id INTEGER,
        message TEXT NOT NULL
    );
    CREATE INDEX events_by_agent ON events(agent_id, id);
    CREATE INDEX events_by_problem ON events(problem_id, id);
    CREATE TABLE controls (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        command TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        value TEXT NOT NULL DEFAULT '',
        applied_at REAL,
        result TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE metrics (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        fleet_mean_sol REAL,
        geomean_speedup REAL,
        gpu_busy REAL,
        queue_wait_s REAL,
        attempts INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        dollars REAL NOT NULL,
        active_problems INTEGER NOT NULL
    );
    """,
    # 2: every model call recorded when it returns (the run's token and dollar totals come from these rows), and
    # each attempt's content hash (a candidate equal to an earlier one of its problem is not evaluated again).
    # Tokens and dollars an older run billed to its attempts become one call row per attempt, so its totals and
    # budgets hold after the upgrade; problem and agent rows already count them.
    """
    CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        agent_id INTEGER REFERENCES agents(id),
        problem_id INTEGER REFERENCES problems(id),
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        tokens_estimated INTEGER NOT NULL DEFAULT 0,
        dollars REAL NOT NULL DEFAULT 0,
        latency_s REAL NOT NULL DEFAULT 0,
        outcome TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX llm_calls_by_problem ON llm_calls(problem_id, id);
    CREATE INDEX llm_calls_by_agent ON llm_calls(agent_id, id);
    INSERT INTO llm_calls (ts, agent_id, problem_id, prompt_tokens, outcome, dollars, detail)
        SELECT created_at, agent_id, problem_id, tokens, 'answer', dollars,
               'calls billed to attempt ' || id || ' before calls were recorded'
        FROM attempts WHERE tokens > 0 OR dollars > 0;
    ALTER TABLE attempts ADD COLUMN content_hash TEXT NOT NULL DEFAULT '';
    CREATE INDEX attempts_by_content ON attempts(problem_id, content_hash);
    """,
    # 3: the notes board: short findings agents record, shown to agents on problems of the same op family.
    """
    CREATE TABLE notes (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        family TEXT NOT NULL,
        agent_id INTEGER REFERENCES agents(id),
        problem_id INTEGER REFERENCES problems(id),
        text TEXT NOT NULL
    );
    CREATE INDEX notes_by_family ON notes(family, id);
    """,
    # 4: the per-workload frontier of each problem (``core.fleet.frontier``), rewritten with every passing result,
    # and every parent of an attempt (a composite has one per member; parent_id stays the first).
    """
    ALTER TABLE problems ADD COLUMN frontier_json TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE attempts ADD COLUMN parents_json TEXT NOT NULL DEFAULT '[]';
    UPDATE attempts SET parents_json = '[' || parent_id || ']' WHERE parent_id IS NOT NULL;
    """,
    # 5: model profiles. Each agent's current profile; each model call's profile and model; each attempt's profile
    # (its agent's when it was made) and the best-SOL gain the planner counts for it (core.fleet.record), so the
    # planner can weigh the profiles' gains against their dollars and GPU seconds.
    """
    ALTER TABLE agents ADD COLUMN profile TEXT NOT NULL DEFAULT '';
    ALTER TABLE llm_calls ADD COLUMN profile TEXT NOT NULL DEFAULT '';
    ALTER TABLE llm_calls ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE attempts ADD COLUMN profile TEXT NOT NULL DEFAULT '';
    ALTER TABLE attempts ADD COLUMN gain REAL NOT NULL DEFAULT 0;
    """,
    # 6: where each attempt was evaluated (``core.evaluate.evaluator.Placement``): a run may span several hosts and
    # GPU models, and a time means something only with the device it was measured on.
    """
    ALTER TABLE attempts ADD COLUMN node TEXT NOT NULL DEFAULT '';
    ALTER TABLE attempts ADD COLUMN gpu INTEGER;
    ALTER TABLE attempts ADD COLUMN device_model TEXT NOT NULL DEFAULT '';
    """,
    # 7: which process is running the run ("host:pid"), so a control sent after that process died is refused.
    """
    ALTER TABLE run ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    """,
    # 8: T_b per GPU model (``core.fleet.baselines``): ``problems.workloads_json`` holds the figures of
    # ``baseline_model``; a cluster's other models get theirs here when an attempt first runs on one.
    """
    ALTER TABLE problems ADD COLUMN baseline_model TEXT NOT NULL DEFAULT '';
    CREATE TABLE model_baselines (
        problem_id INTEGER NOT NULL REFERENCES problems(id),
        device_model TEXT NOT NULL,
        workloads_json TEXT NOT NULL,
        PRIMARY KEY (problem_id, device_model)
    );
    """,
    # 9: best attempts re-verified with upstream SOL-ExecBench's full correctness rules (``core.fleet.verify``):
    # "" not re-verified, "passed: ..." or "failed: ...".
    """
    ALTER TABLE attempts ADD COLUMN verified TEXT NOT NULL DEFAULT '';
    """,
    # 10: beside the busy fraction (time work held the devices), the time they ran kernels while work waited
    # (``core.evaluate.kernel_time``; NULL: not measured, ``gpu_kernel_note`` says why), and what the held time
    # went to (``core.evaluate.usage.PoolUsage.held_shares``: share of the wanted time per phase).
    """
    ALTER TABLE metrics ADD COLUMN gpu_kernel REAL;
    ALTER TABLE metrics ADD COLUMN gpu_kernel_note TEXT NOT NULL DEFAULT '';
    ALTER TABLE metrics ADD COLUMN gpu_held_json TEXT NOT NULL DEFAULT '{}';
    """,
    # 11: how long each problem's preparation took (T_sol, T_b, the seed), for the estimate of the preparation left
    # (``core.report.progress``), the same in the log and the TUI; NULL: not prepared, or before this version.
    """
    ALTER TABLE problems ADD COLUMN preparation_s REAL;
    """,
    # 12: each model call's cached prompt tokens and reasoning tokens (parts of its prompt and completion tokens) and
    # what they cost (parts of its dollars, ``core.llm.usage.cost_parts``); 0 in rows written before.
    """
    ALTER TABLE llm_calls ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE llm_calls ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE llm_calls ADD COLUMN cached_dollars REAL NOT NULL DEFAULT 0;
    ALTER TABLE llm_calls ADD COLUMN reasoning_dollars REAL NOT NULL DEFAULT 0;
    """,
)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file up to the newest layout; returns the version it is at."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise ValueError(f"the run store is version {version}, newer than this kernelfleet ({len(MIGRATIONS)})")
    for number in range(version + 1, len(MIGRATIONS) + 1):
        with conn:
            conn.executescript("BEGIN;" + MIGRATIONS[number - 1] + f";PRAGMA user_version = {number};")
    return len(MIGRATIONS)
