"""The README stays a front door: small, its test command the one CI runs, its links alive."""
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_at_most_12_kb():
    assert len(README.encode()) <= 12 * 1024, "README.md is a front door: move details to docs/"


def test_ci_runs_the_readmes_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in README.splitlines() if line.endswith("-m pytest -q"))
    # .ci/run quiets pip's output; otherwise the command is the README's, word for word.
    assert command.replace("pip install -e", "pip install -q -e") in ci


def test_local_links_resolve():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)\)", doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
