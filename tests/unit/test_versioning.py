"""A worker build's name in its Worker Deployment, and the carried states' schema versions."""

from __future__ import annotations

import pytest

from admitflow import schema, versioning
from admitflow.admission.workload import WorkloadState
from admitflow.wire import CarriedState
from tests.builders import manifest, workload_manifest


@pytest.mark.parametrize(
    ("deployment", "build", "error"),
    [
        pytest.param("admitflow", "0.2.0", None, id="the-release-as-build-id"),
        pytest.param("team_a-prod", "2026.12.08+3f2a1c", None, id="a-build-id-with-a-commit"),
        pytest.param("admit.flow", "1", 'deployment name "admit.flow": letters, digits, "_" and "-" only, at most 255 characters',
                     id="a-dot-in-the-deployment-name"),
        pytest.param("admitflow", "a:b", 'build id "a:b": letters, digits, "_", "-", "." and "+" only, at most 255 characters',
                     id="a-colon-in-the-build-id"),
        pytest.param("admitflow", "x" * 256, f'build id "{"x" * 256}": letters, digits, "_", "-", "." and "+" only, at most 255 characters',
                     id="a-build-id-past-255"),
    ],
)
def test_a_build_is_named_as_temporal_takes_it(deployment, build, error):
    """Temporal refuses "." and ":" in a deployment name (its separators), and a worker given one
    polls without error and never shows up: refused here, in one line."""
    if error is None:
        v = versioning.deployment_version(deployment, build)
        assert (v.deployment_name, v.build_id) == (deployment, build)
    else:
        with pytest.raises(versioning.VersioningError) as err:
            versioning.deployment_version(deployment, build)
        assert str(err.value) == error


def test_the_runs_pinned_to_a_version_are_asked_in_visibilitys_spelling():
    v = versioning.deployment_version("admitflow", "0.2.0")
    assert versioning.pinned_query(v) == (
        "TemporalWorkerDeploymentVersion='admitflow:0.2.0' AND TemporalWorkflowVersioningBehavior='Pinned' "
        "AND ExecutionStatus='Running'"
    )


def test_every_carried_state_says_its_schema_version():
    st = WorkloadState(workload=manifest(workload_manifest("job")))
    assert st.to_wire()["schemaVersion"] == schema.SCHEMA_VERSION
    assert WorkloadState.model_validate({**st.to_wire(), "schemaVersion": schema.SCHEMA_VERSION}) == st


class Shape(CarriedState):
    """A carried state whose field `b` was called `a` in schema version 1."""

    b: int = 0


def test_a_state_an_earlier_build_wrote_is_brought_up_to_this_builds_shape(monkeypatch):
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(schema.STEPS, "Shape", {1: lambda d: {**{k: v for k, v in d.items() if k != "a"}, "b": d["a"]}})
    assert Shape.model_validate({"schemaVersion": 1, "a": 7}).b == 7
    assert Shape.model_validate({"a": 7}).b == 7, "a state from before schema versions is version 1"
    assert Shape.model_validate({"schemaVersion": 3, "b": 8}).b == 8, "this build's own shape is read as it is"


@pytest.mark.parametrize(
    ("written", "error"),
    [
        pytest.param(2, "Shape of schema version 2, written by a newer build: this build reads up to 1", id="a-newer-build"),
        pytest.param("two", "Shape: schemaVersion 'two' is not a version", id="not-a-number"),
        pytest.param(0, "Shape: schemaVersion 0 is not a version", id="zero"),
    ],
)
def test_a_state_this_build_cannot_read_is_refused_in_one_line(written, error):
    with pytest.raises(ValueError, match=error):
        Shape.model_validate({"schemaVersion": written, "b": 1})
