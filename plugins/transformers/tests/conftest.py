"""The transformers plugin's tests: the core tests' tiny model (tests/tinymodel.py) on the path."""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
