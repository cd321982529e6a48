"""The trainers register lazy factories (no torch to list them) that say what their classes say."""
import pytest

from evolver import plugins


@pytest.mark.parametrize("name, module, cls", [("sft", "evolver_skillrl.sft", "SFTTrainer"),
                                               ("skillrl", "evolver_skillrl.trainer", "SkillRLTrainer"),
                                               ("grpo", "evolver_grpo.trainer", "GRPOTrainer")])
def test_a_lazy_trainer_factory_carries_its_classes_flag(monkeypatch, name, module, cls):
    import importlib

    monkeypatch.setenv("EVOLVER_PLUGINS", "skillrl,grpo")
    plugins.reset()
    factory = plugins.get("trainer", name).factory
    assert factory.flag is getattr(importlib.import_module(module), cls).flag


def test_the_public_names_load_lazily_and_resolve():
    """``evolver_skillrl.__all__`` is what other plugins may use (its cold-start SFT): the package loads no
    torch until one is asked for."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "import sys, evolver_skillrl\nassert 'torch' not in sys.modules\n"],
                   check=True)
    import evolver_skillrl
    from evolver_skillrl.options import SkillSFTOptions
    from evolver_skillrl.sft import SkillSFTTrainer
    from evolver_training import SFTOptions, SFTTrainer

    assert evolver_skillrl.SkillSFTTrainer is SkillSFTTrainer and evolver_skillrl.SkillSFTOptions is SkillSFTOptions
    assert sorted(evolver_skillrl.__all__) == ["SkillSFTOptions", "SkillSFTTrainer"]
    assert issubclass(SkillSFTTrainer, SFTTrainer) and issubclass(SkillSFTOptions, SFTOptions)  # the training layer's
