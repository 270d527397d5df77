import copy
import json

import pytest
from solution_helpers import FAST_EXAMPLE, base_dict


@pytest.fixture
def base():
    return copy.deepcopy(base_dict())


@pytest.fixture
def fast_example_dict():
    return json.loads(FAST_EXAMPLE.read_text())


@pytest.fixture
def build_service(tmp_path):
    from core.build import BuildService

    return BuildService(cache_dir=tmp_path / "build-cache")
