import pytest

from tui_store import NOW, build_store


@pytest.fixture
def run_dir(tmp_path):
    """A fresh deterministic run store in a folder always named demo-run (the header shows the name)."""
    return build_store(tmp_path / "demo-run")


@pytest.fixture
def make(run_dir):
    """A watcher on the test store with the fixed clock and no timed polling (tests call app.poll_now())."""
    from tui.app import make_app

    def factory(**kwargs):
        return make_app(run_dir, poll_s=kwargs.pop("poll_s", None), clock=lambda: NOW, **kwargs)

    return factory


@pytest.fixture
def anyio_backend():
    """Async tests (Textual's Pilot) run on asyncio through anyio's pytest plugin."""
    return "asyncio"
