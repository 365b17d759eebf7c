"""How a run of admitflow's workflows ends for the next one: continue-as-new, onto the deployment's
current build (admitflow.versioning).

Every run is pinned to the build that started it. It moves to the current build only here, at a
continue-as-new: when the server suggests one (its history grows), or as soon as it can once its
target version has changed (a new build was made current; the `version_changed` signal that
`admitflow deployment set-current` sends wakes a run that waits for nothing). The new run reads the
state the old build wrote (admitflow.schema). On an unversioned worker the target never changes and
the next run stays where it is.
"""

from typing import Any, NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract


def continue_as_new_due() -> bool:
    """The run should end for the next one as soon as it is quiet."""
    info = workflow.info()
    return info.is_continue_as_new_suggested() or info.is_target_worker_deployment_version_changed()


def continue_as_new(input: Any) -> NoReturn:
    """Continue as new with `input`, the next run starting on the deployment's current build."""
    workflow.continue_as_new(input, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE)


class Movable:
    """The `version_changed` signal, for every admitflow workflow: it carries nothing, and the
    workflow task it brings refreshes `is_target_worker_deployment_version_changed`, which the run's
    loop waits on (`continue_as_new_due`)."""

    @workflow.signal(name=contract.VERSION_CHANGED)
    def version_changed(self, *payload: Any) -> None:
        pass
