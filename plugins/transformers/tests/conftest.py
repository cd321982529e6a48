"""The transformers plugin's tests: the core tests' tiny model (tests/tinymodel.py) on the path."""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from tinymodel import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    from evolver_transformers.backend import TransformersBackend

    return TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=4)
