"""The names other plugins use (``evolver_grpo.__all__``, the training layer's ``evolver_training.__all__``
and ``evolver_transformers.__all__`` that they lean on): importing the packages loads no torch, and every
name resolves to what its module defines."""
import importlib
import subprocess
import sys

import pytest

PACKAGES = ("evolver_grpo", "evolver_training", "evolver_transformers")


def test_the_packages_load_no_torch_until_a_name_is_used():
    code = ("import sys, evolver_grpo, evolver_training, evolver_transformers\n"
            "assert 'torch' not in sys.modules, 'importing a plugin package loaded torch'\n"
            "assert not hasattr(evolver_grpo, 'no_such_name')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_its_module(package):
    pytest.importorskip("torch")
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        module, _, attr = pkg._API[name].partition(":")
        assert getattr(pkg, name) is getattr(importlib.import_module(module), attr or name), name


def test_a_renamed_name_is_the_function_it_names():
    pytest.importorskip("torch")
    from evolver_training import save_checkpoint
    from evolver_training.checkpoint import save

    assert save_checkpoint is save
