"""Shared by the preference plugin's tests: the GRPO tests' toy benchmark and tiny model on the path."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "grpo" / "tests"))  # letterbench.py
sys.path.insert(0, str(HERE.parents[2] / "tests"))  # tinymodel.py


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=2048)
