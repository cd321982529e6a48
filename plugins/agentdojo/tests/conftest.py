"""The agentdojo plugin's tests: the core tests' helper modules (tests/) on the path."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
