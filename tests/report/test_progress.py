"""The preparation's progress and its ETA (core.report.progress): the one formula the headless log and the TUI's
header use."""

import dataclasses

import pytest

from core.report.progress import (duration, is_prepared, preparation_eta_s, preparation_left_by_subset_s,
                                   preparation_left_s, preparation_line)
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


def subset_row(n: int, subset: str, *, took_s: float | None = None, prepared=False, status="waiting"):
    return dataclasses.replace(row(n, attempts=1 if prepared or took_s else 0, status=status), subset=subset,
                               preparation_s=took_s)


def test_the_eta_counts_each_subset_at_its_own_pace_and_leaves_out_the_unrunnable():
    # L1 problems took 100 s each, Quant ones 10 s; 220 s of preparation in 120 s: 1.83 side by side. An unrunnable
    # problem is not counted, nor one prepared with no time recorded (an older store); a subset with none done yet
    # counts at every subset's mean (55 s).
    rows = ([subset_row(1, "L1", took_s=100.0), subset_row(2, "L1", took_s=100.0),
             subset_row(3, "Quant", took_s=10.0), subset_row(4, "Quant", took_s=10.0),
             subset_row(5, "L1", prepared=True)]
            + [subset_row(10 + i, "L1") for i in range(8)] + [subset_row(20 + i, "Quant") for i in range(4)]
            + [subset_row(30, "L2"), subset_row(31, "FlashInfer", status="unrunnable")])
    left = preparation_left_by_subset_s(rows, 120.0)
    assert left == pytest.approx((8 * 100 + 4 * 10 + 55) / (220 / 120))
    assert preparation_eta_s(rows, 120.0) == left
    assert preparation_line(rows, 120.0) == ("prepared 5/18 problems in 2 min; about 8 min 8 s left (L1 1 min 40 s, "
                                             "Quant 10 s each)")
    # Without recorded times (a store from before version 11): the pace so far.
    older = [dataclasses.replace(r, preparation_s=None) for r in rows]
    assert preparation_left_by_subset_s(older, 120.0) is None
    assert preparation_eta_s(older, 120.0) == preparation_left_s(5, 18, 120.0)
