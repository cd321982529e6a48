"""Meta-Harness for evolver: search over harness code (``evolver run --proposer meta-harness``)."""
from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []


@hookimpl
def register_proposers(register):
    from evolver_metaharness.proposer import MetaHarnessProposer

    register("meta-harness", MetaHarnessProposer,
             "whole history as files (source, scores, raw traces) -> new harness code, a hypothesis and a "
             "mechanism per candidate")


@hookimpl
def on_run_end(run, summary):
    """Refresh the workspace once more, so after the run it also holds the last iteration's outcomes."""
    if "meta-harness" not in run.config.proposers:
        return
    from evolver_metaharness.workspace import export, workspace_root

    export(run, workspace_root(run, run.config.plugins.get("meta-harness", {}).get("workspace")))
