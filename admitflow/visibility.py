"""Workloads as Temporal's visibility store knows them: the list query for a set of filters
(namespace, LocalQueue, kubectl label selector, phase, ...) and a workload's row rebuilt from its
workflow's search attributes. Lists (`admitflow get workloads`, `-w`, `Controller.outstanding()`)
read only this: one ListWorkflowExecutions call per page of 1,000 workloads, no query to any
workflow. Pure: no I/O.

A workload's labels are kept in `AdmitflowLabels` as `key=value` entries plus one bare `key` entry
per label (label keys cannot contain "="), so that every kubectl selector operator is one clause:

    a=b, a==b       AdmitflowLabels = 'a=b'
    a!=b            AdmitflowLabels != 'a=b'        (no label a, or another value: kubectl's)
    a in (b,c)      AdmitflowLabels IN ('a=b', 'a=c')
    a notin (b,c)   AdmitflowLabels NOT IN ('a=b', 'a=c')
    a               AdmitflowLabels = 'a'
    !a              AdmitflowLabels != 'a'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from admitflow import contract, ids
from admitflow import search_attributes as sa

API_VERSION = "kueue.x-k8s.io/v1beta2"

# The phases a workload holds quota in (its RESERVED IN column names its ClusterQueue).
RESERVING_PHASES = ("QuotaReserved", "Admitted")

# The server's own attribute for a workflow whose task failed this many times in a row
# (dynamic config system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute; `admitflow dev`
# sets it to 2: the third attempt). Its values read "category=WorkflowTaskFailed",
# "cause=WorkflowTaskFailedCauseWorkflowWorkerUnhandledFailure".
REPORTED_PROBLEMS = "TemporalReportedProblems"


class SelectorError(ValueError):
    """A label selector kubectl would not parse; the message is one line."""


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # =, !=, in, notin, exists, !
    values: tuple[str, ...] = ()


_SET = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=<>(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<not>!?)\s*(?P<key>[^\s!=<>(),]+)\s*$")


def _split(text: str) -> list[str]:
    """Requirements are separated by commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            raise SelectorError(f'label selector "{text}": unbalanced ")"')
        current += ch
    if depth:
        raise SelectorError(f'label selector "{text}": unbalanced "("')
    return [*parts, current]


def _check(text: str, key: str, values: Sequence[str]) -> None:
    from admitflow.api.names import label_value_errors, qualified_name_errors

    for message in qualified_name_errors(key):
        raise SelectorError(f'label selector "{text}": key "{key}": {message}')
    for value in values:
        for message in label_value_errors(value):
            raise SelectorError(f'label selector "{text}": value "{value}": {message}')


def parse_selector(text: str) -> list[LabelRequirement]:
    """kubectl's `-l` syntax (k8s.io/apimachinery labels.Parse) without `>`/`<`, which visibility
    cannot compare: `a=b,c!=d,e in (f,g),h notin (i),j,!k`. An empty selector selects everything."""
    if not text.strip():
        return []
    out = []
    for part in _split(text):
        if not part.strip():
            raise SelectorError(f'label selector "{text}": empty requirement (a comma too many?)')
        if m := _SET.match(part):
            values = tuple(v.strip() for v in m["values"].split(","))
            if m["values"].strip() == "" or "" in values:
                raise SelectorError(f'label selector "{text}": "{part.strip()}": a set needs one or more values, as in (a,b)')
            _check(text, m["key"], values)
            out.append(LabelRequirement(m["key"], m["op"], values))
        elif m := _EQ.match(part):
            _check(text, m["key"], [m["value"]])
            out.append(LabelRequirement(m["key"], "!=" if m["op"] == "!=" else "=", (m["value"],)))
        elif m := _EXISTS.match(part):
            _check(text, m["key"], [])
            out.append(LabelRequirement(m["key"], "!" if m["not"] else "exists"))
        elif "<" in part or ">" in part:
            raise SelectorError(f'label selector "{text}": "{part.strip()}": > and < are not supported here')
        else:
            raise SelectorError(
                f'label selector "{text}": cannot parse "{part.strip()}": expected key, !key, key=value, '
                "key!=value, key in (v1,v2) or key notin (v1,v2)"
            )
    return out


def labels_match(requirements: Sequence[LabelRequirement], labels: Mapping[str, str]) -> bool:
    """What the selector's clauses select, for objects that are not in visibility (LocalQueues,
    ClusterQueues): the same answer, by the same rule."""
    entries = set(label_entries(labels))
    for r in requirements:
        wanted = {f"{r.key}={v}" for v in r.values} if r.operator in ("=", "!=", "in", "notin") else {r.key}
        if (r.operator in ("=", "in", "exists")) != bool(entries & wanted):
            return False
    return True


def label_entries(labels: Mapping[str, str] | None) -> list[str]:
    """The values of AdmitflowLabels for these labels: `key=value` and `key` for each."""
    labels = labels or {}
    return sorted([f"{k}={v}" for k, v in labels.items()] + list(labels))


def quoted(value: str) -> str:
    """A string literal of the visibility query language."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def selector_clauses(requirements: Sequence[LabelRequirement]) -> list[str]:
    name = sa.LABELS.name
    out = []
    for r in requirements:
        entries = ", ".join(quoted(f"{r.key}={v}") for v in r.values)
        match r.operator:
            case "=":
                out.append(f"{name} = {quoted(f'{r.key}={r.values[0]}')}")
            case "!=":
                out.append(f"{name} != {quoted(f'{r.key}={r.values[0]}')}")
            case "in":
                out.append(f"{name} IN ({entries})")
            case "notin":
                out.append(f"{name} NOT IN ({entries})")
            case "exists":
                out.append(f"{name} = {quoted(r.key)}")
            case "!":
                out.append(f"{name} != {quoted(r.key)}")
    return out


def workloads_query(
    *,
    namespace: str | None = None,
    name: str | None = None,
    local_queue: str | None = None,
    phase: str | None = None,
    cluster_queue: str | None = None,
    pending_check: str | Sequence[str] | None = None,
    label_selector: str | None = None,
    updated_since: datetime | None = None,
    finished: bool = True,
) -> str:
    """The visibility query for a list of workloads: their workflows that run, and those that
    completed because the workload finished (a deleted workload's completed run, a run continued as
    new or terminated are left out); e.g. `WorkflowType = 'WorkloadWorkflow' AND (ExecutionStatus
    = 'Running' OR ...) AND AdmitflowPhase = 'Backoff'`, what the Temporal UI's filter box takes too.
    `namespace` is the Kueue namespace; raises SelectorError or ValueError with one line."""
    from admitflow.admission.workload import PHASES

    if phase is not None and phase not in PHASES:
        raise ValueError(f'unknown phase "{phase}": must be one of {", ".join(PHASES)}')
    alive = "ExecutionStatus = 'Running'"
    if finished:
        alive = f"({alive} OR (ExecutionStatus = 'Completed' AND {sa.PHASE.name} = 'Finished'))"
    clauses = [f"WorkflowType = '{contract.WORKLOAD_WORKFLOW}'", alive]
    if namespace is not None and name is not None:
        clauses.append(f"WorkflowId = {quoted(ids.workload_id(f'{namespace}/{name}'))}")
    elif namespace is not None:
        clauses.append(f"WorkflowId STARTS_WITH {quoted(ids.workload_id(f'{namespace}/'))}")
    for attribute, value in ((sa.PHASE, phase), (sa.CLUSTER_QUEUE, cluster_queue), (sa.LOCAL_QUEUE, local_queue)):
        if value is not None:
            clauses.append(f"{attribute.name} = {quoted(value)}")
    if isinstance(pending_check, str):
        clauses.append(f"{sa.PENDING_CHECKS.name} = {quoted(pending_check)}")
    elif pending_check is not None:
        clauses.append(f"{sa.PENDING_CHECKS.name} IN ({', '.join(quoted(c) for c in pending_check) or quoted('')})")
    clauses += selector_clauses(parse_selector(label_selector or ""))
    if updated_since is not None:
        # What changed since (a wedged workload changes nothing, but its row says why: kept in).
        since = updated_since.astimezone(UTC).isoformat().replace("+00:00", "Z")
        clauses.append(f"({sa.UPDATED.name} >= '{since}' OR {REPORTED_PROBLEMS} IS NOT NULL)")
    return " AND ".join(clauses)


def _labels(entries: Sequence[str] | None) -> dict[str, str]:
    return dict(e.split("=", 1) for e in entries or () if "=" in e)


def _time(value: datetime | None) -> str | None:
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z") if value else None


def problems(attributes: Mapping[str, Any]) -> dict[str, str]:
    """TemporalReportedProblems as a map: {"category": "WorkflowTaskFailed", "cause": ...}."""
    return dict(p.split("=", 1) for p in attributes.get(REPORTED_PROBLEMS) or () if "=" in p)


def row(workflow_id: str, attributes: Mapping[str, Any], started: datetime | None = None) -> dict[str, Any] | None:
    """A workload in Kueue's wire shape with what its search attributes say: metadata (name,
    namespace, labels, creationTimestamp), spec.queueName and priority, status.admission's
    ClusterQueue and the QuotaReserved and Admitted conditions its phase implies (or, once it has
    finished, only Finished: whether it was admitted first is not in visibility). Three
    keys are not Kueue's and never leave admitflow: `phase`, `pendingChecks` and `retryCount`, and,
    for a workflow whose task keeps failing, `workflow` (as an unanswered workload has). None for a
    workflow ID that is not a workload's. `attributes` maps attribute names to values."""
    key = ids.workload_key(workflow_id)
    if key is None:
        return None
    namespace, name = key.split("/", 1)
    phase = attributes.get(sa.PHASE.name) or "Pending"
    cluster_queue = attributes.get(sa.CLUSTER_QUEUE.name) or ""
    reserved = phase in RESERVING_PHASES
    if phase == "Finished":
        # Whether it was admitted before it finished is not in visibility (its full object keeps
        # its last admission, as Kueue's does): its row says only that it finished.
        conditions = [{"type": "Finished", "status": "True"}]
    else:
        conditions = [{"type": "QuotaReserved", "status": str(reserved)}, {"type": "Admitted", "status": str(phase == "Admitted")}]
    created = attributes.get(sa.CREATED.name) or started
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _time(created)},
        "spec": {"queueName": attributes.get(sa.LOCAL_QUEUE.name) or "", "priority": attributes.get(sa.PRIORITY.name) or 0},
        "status": {"conditions": conditions},
        "phase": phase,
        "pendingChecks": list(attributes.get(sa.PENDING_CHECKS.name) or ()),
        "retryCount": attributes.get(sa.RETRY_COUNT.name) or 0,
    }
    labels = _labels(attributes.get(sa.LABELS.name))
    if labels:
        out["metadata"]["labels"] = labels
    if reserved and cluster_queue:
        out["status"]["admission"] = {"clusterQueue": cluster_queue}
    if phase == "Inactive":
        out["spec"]["active"] = False
    reported = problems(attributes)
    if reported:
        out["workflow"] = {
            "status": "TaskFailing",
            "workflowId": workflow_id,
            "phase": phase,
            "clusterQueue": cluster_queue,
            "cause": reported.get("cause", ""),
        }
    return out
