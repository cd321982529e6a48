"""EvoSkill for evolver: failure-driven skill discovery (``evolver run --proposer evoskill``)."""
from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []


@hookimpl
def register_proposers(register):
    from evolver_evoskill.proposer import EvoSkillProposer

    register("evoskill", EvoSkillProposer,
             "failure traces -> create/edit one skill (proposer + builder roles); merge of frontier skills")
