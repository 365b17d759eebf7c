"""AdmissionCheckParameters (admitflow.io/v1): the parameters of a check controller written by you.

Kueue lets each check controller define its own parameters kind (a CRD) and points at it from
`AdmissionCheck.spec.parameters`. admitflow has no CRD registry, so custom controllers share this one
kind: a named, cluster-scoped object whose `spec` is free-form JSON. The engine hands the `spec` to
the controller with every check request, and the controller SDK parses it into the controller's own
pydantic model (`admitflow.controller.Controller(parameters=...)`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import KueueModel
from .meta import ObjectMeta

API_GROUP = "admitflow.io"
API_VERSION = "admitflow.io/v1"


class AdmissionCheckParameters(KueueModel):
    """Parameters for a custom admission check controller. Cluster-scoped."""

    api_version: Literal["admitflow.io/v1"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["AdmissionCheckParameters"] = Field(default="AdmissionCheckParameters", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; AdmissionChecks refer to `name`.")
    spec: dict[str, Any] = Field(
        default_factory=dict, description="Free-form; its controller defines and validates the fields."
    )

    @property
    def key(self) -> str:
        return self.metadata.name
