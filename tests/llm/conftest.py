import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "llm_server: talks to a real OpenAI-compatible server named by the "
                                       "KERNELFLEET_LLM_SERVER environment variable (skipped without it)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KERNELFLEET_LLM_SERVER"):
        return
    skip = pytest.mark.skip(reason="set KERNELFLEET_LLM_SERVER to the base URL of an OpenAI-compatible server")
    for item in items:
        if "llm_server" in item.keywords:
            item.add_marker(skip)
