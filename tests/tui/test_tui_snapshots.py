"""Screens as SVG snapshots (pytest-textual-snapshot) on the deterministic store with a fixed clock, at 80×24 and
200×50. Regenerate after an intended change with ``pytest tests/tui --snapshot-update`` and review the SVGs."""

import pytest

SIZES = [(80, 24), (200, 50)]
OPEN_DETAIL = ["slash", *"row_rms", "enter", "escape", "enter"]  # filter to the problem, clear, open it


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_grid(snap_compare, make, size):
    assert snap_compare(make(), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_detail(snap_compare, make, size):
    assert snap_compare(make(), terminal_size=size, press=[*OPEN_DETAIL, "_"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_diff_unified(snap_compare, make, size):
    assert snap_compare(make(), terminal_size=size, press=[*OPEN_DETAIL, "d", "p", "_"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_diff_side_by_side(snap_compare, make, size):
    assert snap_compare(make(), terminal_size=size, press=[*OPEN_DETAIL, "d", "p", "t", "_"])


def test_help(snap_compare, make):
    """The key help, whole at 80x24 (no scrolling)."""
    assert snap_compare(make(), terminal_size=(80, 24), press=["question_mark", "_"])
