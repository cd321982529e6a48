"""The experience plugin's tests: the GRPO tests' toy benchmark and tiny model, one per session."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for p in (HERE, ROOT / "plugins" / "grpo" / "tests", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_positions=2048)
