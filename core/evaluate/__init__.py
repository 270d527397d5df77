"""The GPU evaluator: isolated warm workers, correctness against the reference, anti-cheat checks, timing."""

from core.evaluate.pool import EvalJob, EvaluationPool
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import ErrorStats, Status, Timing, Verdict, WorkloadVerdict

__all__ = ["ErrorStats", "EvalJob", "EvaluationPool", "Status", "Timing", "TimingPolicy", "Verdict",
           "WorkloadVerdict"]
