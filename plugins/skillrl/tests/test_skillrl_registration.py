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
