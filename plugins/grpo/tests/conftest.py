"""Shared by the GRPO plugin's tests: the tests' helper modules on the path and one tiny model."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "tests"))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=2048)
