"""The preparation's progress and its ETA (core.report.progress): the one formula the headless log and the TUI's
header use."""

from core.report.progress import duration, is_prepared, preparation_left_s, preparation_line
from core.store.model import ProblemRow, WorkloadInfo


def row(n: int, *, workloads=(), attempts=0, status="waiting") -> ProblemRow:
    return ProblemRow(n, f"s/p{n}", f"p{n}", "s", "", "", 0, False, False, status, None, None, None, None, None,
                      None, attempts, 0, 0, 0, 0.0, 0.0, 0.0, None, tuple(workloads))


def test_prepared_means_measured_or_attempted_or_failed():
    assert not is_prepared(row(1))
    assert is_prepared(row(1, workloads=(WorkloadInfo(0, "n=1", 1.0),)))
    assert is_prepared(row(1, attempts=1))  # nothing to measure, its seed recorded
    assert is_prepared(row(1, status="failed"))


def test_the_eta_is_the_pace_so_far():
    assert preparation_left_s(0, 21, 30.0) is None  # no pace yet
    assert preparation_left_s(21, 21, 300.0) is None
    assert preparation_left_s(5, 21, 249.0) == 249.0 / 5 * 16
    rows = [row(i, attempts=1) for i in range(5)] + [row(i) for i in range(5, 21)]
    assert preparation_line(rows, 249.0) == "prepared 5/21 problems in 4 min 9 s; about 13 min left"
    assert preparation_line(rows[:5], 100.0) == ""
    assert preparation_line([row(1)], 10.0) == "prepared 0/1 problems in 10 s"


def test_durations_read_as_a_person_would_say_them():
    assert [duration(s) for s in (0.4, 59, 61, 600, 3599, 7260)] == ["0 s", "59 s", "1 min 1 s", "10 min", "59 min",
                                                                      "2 h 1 min"]
