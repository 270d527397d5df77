"""The header of a GPU run whose pool measured kernel time: held and running kernels side by side, the whole line
readable at 80 columns (the sparkline gives way), and as before where kernel time is not measured."""

import pytest
from tui_store import NOW, build_store

from core.store import RunReader, RunStore
from tui.fleet.model import SPARKLINE_POINTS, header_lines
from tui.snapshot import Poller


@pytest.fixture
def run_dir(tmp_path):
    """The watcher tests' store as a GPU run whose samples measured kernel time (replaces the conftest's)."""
    folder = build_store(tmp_path / "demo-run")
    store = RunStore(folder)
    store.conn.execute("UPDATE run SET device = 'cuda'")
    store.conn.execute("UPDATE metrics SET gpu_kernel = 0.52, gpu_kernel_note = 'NVML utilization samples'")
    store.close()
    return folder


def _second_line(run_dir, width):
    with RunReader(run_dir) as reader:
        return header_lines(Poller(reader, "demo-run", lambda: NOW).poll()[0], width)[1]


def test_the_header_makes_room_for_kernel_time_at_80_columns(run_dir):
    wide = _second_line(run_dir, None)
    assert wide.startswith("GPU held 80% kernels 52% · ") and "llm ok" in wide and wide.endswith("geomean 1.67x")
    narrow = _second_line(run_dir, 78)  # 80 columns less the header's padding
    assert len(narrow) <= 78 and narrow.startswith("GPU held 80% kernels 52% · ")
    assert "llm ok" not in narrow and narrow.endswith(" · geomean 1.67x") and "SOL 0.72 " in narrow
    spark = narrow.split("SOL 0.72 ")[1].split(" · ")[0]
    assert 0 < len(spark) < SPARKLINE_POINTS
    assert _second_line(run_dir, 200) == wide  # room enough: nothing left out


def test_header_with_kernel_time(snap_compare, make):
    assert snap_compare(make(), terminal_size=(80, 24))
