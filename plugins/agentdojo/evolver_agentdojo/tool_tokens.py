"""How many tokens each AgentDojo suite's tools take in a small model's context: as the seed harness lists them
in its system prompt (``Harness.tool_list``: name(params): description) and as the full JSON schemas a backend
is passed. Counted with the embedded model's tokenizer (SmolLM2-135M-Instruct, an 8,192-token window).

    .venv/bin/python -m evolver_agentdojo.tool_tokens

It needs the transformers plugin (for the tokenizer's files), which plugins/requirements.txt installs.
"""
from __future__ import annotations

import importlib.util
import json

from evolver import Harnesses


def seed_tool_list():
    """The seed harness's ``tool_list``, read from the seed program's own file (as a new program copies it)."""
    spec = importlib.util.spec_from_file_location("seed_harness", Harnesses.SEED_DIR / "harness" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Harness.tool_list


def main() -> None:
    from evolver_transformers import embedded_model_dir
    from evolver_agentdojo.benchmark import AgentDojo
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(embedded_model_dir() / "tokenizer.json"))
    count = lambda text: len(tokenizer.encode(text).ids)  # noqa: E731
    tool_list = seed_tool_list()
    bench = AgentDojo()
    print(f"{'suite':<10} {'tools':>5} {'tool list':>9} {'JSON':>6} {'system prompt':>13}")
    for name, suite in bench.suites.items():
        listed = tool_list(suite.tools)
        system = bench.harness_hints["system_prompt"] + "\n\n" + listed
        print(f"{name:<10} {len(suite.tools):>5} {count(listed):>9} {count(json.dumps(suite.tools)):>6} "
              f"{count(system):>13}")


if __name__ == "__main__":
    main()
