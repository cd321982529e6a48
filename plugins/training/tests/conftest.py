"""Shared by the training layer's tests: the core's test helpers on the path and one tiny model."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=2048)
