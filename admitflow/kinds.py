"""The kinds `admitflow` takes and how a user may name them, as kubectl does: the kind, its plural,
its short names, `kind.group` (`clusterqueues.kueue.x-k8s.io`, also with the version), and
`kind/name` (`cq/gpu`); and how an object is printed, `kind.group/key`.

Nothing heavy is imported here: the command's parser is built from this module, so `admitflow
--help` starts without loading the Temporal SDK or the API models.
"""

from __future__ import annotations

import re

# What `get`, `describe` and `delete` accept, kubectl-style: kind, plural, short names.
KIND_NAMES = {
    "ResourceFlavor": ("resourceflavor", "resourceflavors", "rf", "flavor", "flavors"),
    "ClusterQueue": ("clusterqueue", "clusterqueues", "cq"),
    "Cohort": ("cohort", "cohorts"),  # Kueue's CRD declares no short name
    "LocalQueue": ("localqueue", "localqueues", "lq", "queue", "queues"),
    "AdmissionCheck": ("admissioncheck", "admissionchecks", "ac"),
    "ProvisioningRequestConfig": ("provisioningrequestconfig", "provisioningrequestconfigs", "prc"),
    "AdmissionCheckParameters": ("admissioncheckparameters", "acp", "parameters"),
    "Configuration": ("configuration", "configurations", "config"),
    "SimulatedNodeGroup": ("simulatednodegroup", "simulatednodegroups", "nodegroup", "nodegroups", "ng"),
    # Kueue's CRD declares no short name.
    "WorkloadPriorityClass": ("workloadpriorityclass", "workloadpriorityclasses"),
    # kubectl's short name for scheduling.k8s.io PriorityClasses.
    "PriorityClass": ("priorityclass", "priorityclasses", "pc"),
    "Workload": ("workload", "workloads", "wl"),
    "Job": ("job", "jobs"),  # batch/v1; kubectl declares no short name
}

# The kinds that live in a (Kueue) namespace: their keys are namespace/name.
NAMESPACED = frozenset({"LocalQueue", "Workload", "ProvisioningRequest", "Job"})

# kubectl's plural resource names, used in messages the way kubectl words them.
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "LocalQueue": "localqueues",
    "AdmissionCheck": "admissionchecks",
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
    "AdmissionCheckParameters": "admissioncheckparameters",
    "Configuration": "configurations",
    "SimulatedNodeGroup": "simulatednodegroups",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "PriorityClass": "priorityclasses",
    "Workload": "workloads",
    "Job": "jobs",
}

# The API group of each kind, as in its apiVersion.
GROUPS = {
    **{kind: "kueue.x-k8s.io" for kind in KIND_NAMES},
    "Configuration": "config.kueue.x-k8s.io",
    "AdmissionCheckParameters": "admitflow.io",
    "SimulatedNodeGroup": "admitflow.io",
    "ProvisioningRequest": "autoscaling.x-k8s.io",
    "PriorityClass": "scheduling.k8s.io",
    "Job": "batch",
}

# The conditions of a ProvisioningRequest (autoscaling.x-k8s.io/v1), in Kueue's order.
PROVISIONING_REQUEST_CONDITIONS = ("Accepted", "Provisioned", "Failed", "BookingExpired", "CapacityRevoked")

# `kind.v1beta2.group`: an API version between the resource and its group.
_VERSION = re.compile(r"v\d+((alpha|beta)\d+)?")


class UnknownKind(ValueError):
    """A resource type admitflow does not have; the message is kubectl's."""

    def __init__(self, name: str) -> None:
        super().__init__(f'the server doesn\'t have a resource type "{name}"')


def kind_of(name: str) -> str:
    """The kind a user means by `name`: a kind, plural or short name, optionally followed by its
    group (`workloads.kueue.x-k8s.io`) or version and group (`cq.v1beta2.kueue.x-k8s.io`)."""
    resource, _, group = name.lower().partition(".")
    for kind, names in KIND_NAMES.items():
        if resource != kind.lower() and resource not in names:
            continue
        version, _, rest = group.partition(".")
        if not group or group == GROUPS[kind] or (_VERSION.fullmatch(version) and rest == GROUPS[kind]):
            return kind
    raise UnknownKind(name)


def split_kind(ref: str) -> tuple[str, str | None]:
    """`cq/gpu` -> ("cq", "gpu"); `workload/team-a/train` -> ("workload", "team-a/train"); a bare
    kind -> (kind, None)."""
    kind, sep, name = ref.partition("/")
    return kind, (name if sep else None)


def qualified(kind: str, key: str) -> str:
    """How kubectl prints an object in its one-line outcomes and with `-o name`: `kind.group/key`
    (the key is namespace/name for namespaced kinds, so that the line can be given back to admitflow)."""
    return f"{kind.lower()}.{GROUPS.get(kind, 'kueue.x-k8s.io')}/{key}"


def short_names() -> list[str]:
    """Every name a kind may be given by, sorted (for help and shell completion)."""
    return sorted({n for names in KIND_NAMES.values() for n in names})
