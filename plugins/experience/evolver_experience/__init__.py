"""Learning from experience, as candidates like any other (``evolver run --proposer imitation
--proposer expert-iteration``): each proposer fine-tunes the parent's policy and proposes the
parent's files with a manifest whose ``model`` is the new checkpoint. The loop checks it, evaluates it
on dev with its own weights and lets the frontier decide, exactly as for a skill or a harness edit.

- ``imitation``: the demonstrations a benchmark offers for its *training* tasks
  (``Benchmark.demonstration``; twx's gold paths), replayed through the parent's harness. Each round
  down a lineage takes the next slice of training tasks, so a later round brings new demonstrations.
- ``expert-iteration``: the parent's own sampled rollouts on training tasks; the successful ones, and
  those that beat the parent's greedy play of the same task, become the fine-tuning data.
- ``skill-miner``: a skill of data mined from the store (steps that raised or lowered the score, steps
  of won episodes) with an observe script that names the next move, and the parent's policy taught to
  follow its notes on demonstrations replayed with them.
"""
from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []


@hookimpl
def register_proposers(register):
    from evolver_experience.expert import ExpertIterationProposer
    from evolver_experience.imitation import ImitationProposer
    from evolver_experience.miner import SkillMinerProposer

    register("imitation", ImitationProposer,
             "fine-tune the parent's policy on the benchmark's demonstrations of training tasks (a checkpoint)")
    register("skill-miner", SkillMinerProposer,
             "mine a skill of data from the store's rewarded steps and won episodes, and teach the policy its notes")
    register("expert-iteration", ExpertIterationProposer,
             "fine-tune the parent's policy on its own successful sampled rollouts of training tasks (a checkpoint)")
