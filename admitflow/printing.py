"""How the CLI shows objects: kubectl's tables, `describe` layout, and json/yaml."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadReport

if TYPE_CHECKING:
    from admitflow.client import ControllerCall

Row = Callable[[dict[str, Any]], list[str]]


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's short age: 45s, 3m, 2h, 4d."""
    if not timestamp:
        return "<unknown>"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == type_), None)


def _status_of(obj: dict[str, Any], type_: str) -> str:
    c = _condition(obj, type_)
    return c["status"] if c else ""


def _meta(obj: dict[str, Any], field: str) -> str:
    return (obj.get("metadata") or {}).get(field) or ""


def _pairs(mapping: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (mapping or {}).items())


def _count(obj: dict[str, Any], field: str) -> str:
    return str((obj.get("status") or {}).get(field, 0))


def _workload_row(o: dict[str, Any]) -> list[str]:
    trouble = o.get("workflow")
    if trouble:
        # Its status cannot be asked for; its search attributes hold the phase it last wrote.
        phase = trouble.get("phase") or ""
        reserved = trouble.get("clusterQueue", "") if phase in ("QuotaReserved", "Admitted") else ""
        admitted, finished = ("True" if phase == "Admitted" else "", "True" if phase == "Finished" else "")
    else:
        reserved = ((o.get("status") or {}).get("admission") or {}).get("clusterQueue", "") if _status_of(o, "QuotaReserved") == "True" else ""
        admitted, finished = _status_of(o, "Admitted"), _status_of(o, "Finished")
    return [
        _meta(o, "namespace"),
        _meta(o, "name"),
        (o.get("spec") or {}).get("queueName") or "",
        reserved,
        admitted,
        finished,
        age(_meta(o, "creationTimestamp")),
    ]


COLUMNS: dict[str, tuple[list[str], Row]] = {
    "ResourceFlavor": (["NAME", "AGE"], lambda o: [_meta(o, "name"), age(_meta(o, "creationTimestamp"))]),
    "ClusterQueue": (
        ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE"],
        lambda o: [
            _meta(o, "name"),
            (o.get("spec") or {}).get("cohortName") or "",
            (o.get("spec") or {}).get("queueingStrategy") or "",
            _count(o, "pendingWorkloads"),
            _count(o, "admittedWorkloads"),
            _status_of(o, "Active"),
        ],
    ),
    "LocalQueue": (
        ["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
        lambda o: [
            _meta(o, "namespace"),
            _meta(o, "name"),
            (o.get("spec") or {}).get("clusterQueue") or "",
            _count(o, "pendingWorkloads"),
            _count(o, "admittedWorkloads"),
        ],
    ),
    "AdmissionCheck": (
        ["NAME", "CONTROLLER", "ACTIVE", "AGE"],
        lambda o: [
            _meta(o, "name"),
            (o.get("spec") or {}).get("controllerName") or "",
            _status_of(o, "Active") or "False",
            age(_meta(o, "creationTimestamp")),
        ],
    ),
    "ProvisioningRequestConfig": (
        ["NAME", "CLASS", "AGE"],
        lambda o: [
            _meta(o, "name"),
            (o.get("spec") or {}).get("provisioningClassName") or "",
            age(_meta(o, "creationTimestamp")),
        ],
    ),
    "AdmissionCheckParameters": (
        ["NAME", "FIELDS", "AGE"],
        lambda o: [_meta(o, "name"), ",".join(sorted(o.get("spec") or {})), age(_meta(o, "creationTimestamp"))],
    ),
    "Configuration": (["NAME", "AGE"], lambda o: [_meta(o, "name") or "config", age(_meta(o, "creationTimestamp"))]),
    "SimulatedNodeGroup": (
        ["NAME", "CAPACITY", "LABELS", "DELAY", "AGE"],
        lambda o: [
            _meta(o, "name"),
            _pairs((o.get("spec") or {}).get("capacity")),
            _pairs((o.get("spec") or {}).get("labels")) or "<none>",
            f"{(o.get('spec') or {}).get('provisioningDelaySeconds', 0)}s",
            age(_meta(o, "creationTimestamp")),
        ],
    ),
    # `admitflow provreq list`: kubectl get provreq's columns, one per condition type.
    "ProvisioningRequest": (
        ["NAMESPACE", "NAME", "CLASS", "ACCEPTED", "PROVISIONED", "FAILED", "BOOKINGEXPIRED", "CAPACITYREVOKED", "AGE"],
        lambda o: [
            _meta(o, "namespace"),
            _meta(o, "name"),
            (o.get("spec") or {}).get("provisioningClassName") or "",
            *(_status_of(o, t) for t in ("Accepted", "Provisioned", "Failed", "BookingExpired", "CapacityRevoked")),
            age(_meta(o, "creationTimestamp")),
        ],
    ),
    "Workload": (["NAMESPACE", "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"], _workload_row),
}

# The column `get workloads` adds when a workload's workflow does not answer: its phase, or why it
# cannot be asked (TaskFailing, NotAnswering).
STATUS = "STATUS"


def workload_status(o: dict[str, Any]) -> str:
    """A workload's STATUS: why its workflow cannot be asked, else its phase."""
    trouble = o.get("workflow")
    if trouble:
        return trouble.get("status") or ""
    report = WorkloadReport.model_validate_json(json.dumps(o))
    return wl.phase(wl.WorkloadState(workload=report))


def columns(kind: str, objects: Sequence[dict[str, Any]]) -> tuple[list[str], Row]:
    """The table's headers and row: COLUMNS, and for workloads a STATUS column when one of them
    does not answer (the others show their phase there)."""
    headers, row = COLUMNS[kind]
    if kind == "Workload" and any(o.get("workflow") for o in objects):
        return [*headers, STATUS], lambda o: [*row(o), workload_status(o)]
    return headers, row


def warnings(kind: str, objects: Sequence[dict[str, Any]]) -> list[str]:
    """kubectl-style warnings (for stderr) about workloads whose workflow does not answer."""
    if kind != "Workload":
        return []
    out = []
    for o in objects:
        trouble = o.get("workflow")
        if trouble:
            key = f"{_meta(o, 'namespace')}/{_meta(o, 'name')}"
            out.append(f"Warning: workload {key} does not answer: {trouble.get('message', '')}; see admitflow describe workload {key}")
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = column_widths(headers, rows)
    return "\n".join(table_row(r, widths) for r in [headers, *rows])


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]


def table_row(row: Sequence[str], widths: Sequence[int]) -> str:
    return "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()


def watch_rows(kind: str, objects: list[dict[str, Any]], shown: dict[str, list[str]], row: Row | None = None) -> list[list[str]]:
    """`get -w`: the rows of objects that are new or changed since `shown` (updated in place), as
    kubectl prints them, one line per change."""
    row = row or COLUMNS[kind][1]
    changed = []
    for obj in objects:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        current = row(obj)
        if shown.get(key) != current:
            shown[key] = current
            changed.append(current)
    return changed


def render(kind: str, objects: list[dict[str, Any]], output: str, single: bool) -> str:
    if output == "table":
        if not objects:
            return "No resources found."
        headers, row = columns(kind, objects)
        return table(headers, [row(o) for o in objects])
    doc: Any = objects[0] if single else {"apiVersion": "v1", "kind": "List", "items": objects}
    if output == "json":
        return json.dumps(doc, indent=2)
    return yaml.safe_dump(doc, sort_keys=False).rstrip()


def _title(key: str) -> str:
    """kubectl describe's field titles: `nominalQuota` -> `Nominal Quota`; a key that is not a
    field name (a label such as `example.com/team`) is shown as it is."""
    if not key.isalnum():
        return key
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return words[:1].upper() + words[1:]


def _describe_value(value: Any, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_title(k)}:")
                _describe_value(v, indent + 1, lines)
            else:
                lines.append(f"{pad}{_title(k)}:  {'' if v is None else v}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                first = True
                for k, v in item.items():
                    prefix = f"{pad}  " if not first else f"{pad}- "
                    first = False
                    if isinstance(v, (dict, list)) and v:
                        lines.append(f"{prefix}{_title(k)}:")
                        _describe_value(v, indent + 2, lines)
                    else:
                        lines.append(f"{prefix}{_title(k)}:  {'' if v is None else v}")
            else:
                lines.append(f"{pad}- {item}")


def describe(obj: dict[str, Any], events: Sequence[dict[str, Any]] | None = (), extra: Sequence[str] = ()) -> str:
    """`extra` lines (already laid out) go after the status, before the events (None: they cannot
    be told, the workload's workflow does not answer)."""
    meta = obj.get("metadata") or {}
    lines = [f"Name:         {meta.get('name', '')}"]
    if meta.get("namespace"):
        lines.append(f"Namespace:    {meta['namespace']}")
    labels = meta.get("labels") or {}
    lines.append("Labels:       " + ("\n              ".join(f"{k}={v}" for k, v in labels.items()) or "<none>"))
    annotations = meta.get("annotations") or {}
    lines.append("Annotations:  " + ("\n              ".join(f"{k}: {v}" for k, v in annotations.items()) or "<none>"))
    lines.append(f"API Version:  {obj.get('apiVersion', '')}")
    lines.append(f"Kind:         {obj.get('kind', '')}")
    for section in ("spec", "status"):
        if obj.get(section):
            lines.append(f"{_title(section)}:")
            _describe_value(obj[section], 1, lines)
    lines.extend(extra)
    if obj.get("kind") in ("Workload", "ClusterQueue"):
        lines.append("Events:")
        if events is None:
            lines.append("  <unknown: only its workflow can tell them; its history in the Temporal UI has them all>")
        elif not events:
            lines.append("  <none>")
        else:
            rows = [[e.get("type", ""), e.get("reason", ""), age(e.get("time")), e.get("message", "")] for e in events]
            lines.extend("  " + line for line in table(["Type", "Reason", "Age", "Message"], rows).splitlines())
    return "\n".join(lines)


def provisioning_rows(attempts: Sequence[dict[str, Any]]) -> list[list[str]]:
    """`describe workload`: each provisioning check's current request and its conditions that hold."""
    rows = []
    for a in attempts:
        request = a.get("request") or {}
        conds = (request.get("status") or {}).get("conditions") or []
        held = ", ".join(f"{c['type']}={c['status']}" for c in conds) or ("creating" if not request else "no conditions yet")
        rows.append([a.get("check", ""), str(a.get("attempt", "")), a.get("name", ""), held])
    return rows


def controller_lines(workload: str, calls: Sequence[ControllerCall], now: datetime | None = None) -> list[str]:
    """What a workload waits for from check controllers (`describe workload`, the main job): who was
    asked and how the call goes, or which inactive check keeps its ClusterQueue shut; and, when
    nobody serves the controller's task queue, what to run in its place."""
    lines = []
    for c in calls:
        if c.inactive:
            lines.append(f"  {c.check}: not Active, so the ClusterQueue admits nothing new until {c.controller} marks it Active")
        elif c.activity_state is None:
            lines.append(f"  {c.check}: asked {c.controller}, which answered Pending; waiting for its verdict")
        else:
            how = [f"attempt {c.activity_attempt} of the activity"]
            if c.activity_state == "scheduled":
                how.append("not picked up yet")
            else:
                how.append(f"running on {c.worker}" if c.worker else "running")
            if c.last_error:
                how.append(f"last error: {c.last_error}")
            lines.append(f"  {c.check}: asked {c.controller} ({', '.join(how)})")
        queue = f'task queue "{c.controller}"'
        last = f"last poll {age(c.last_poll.isoformat(), now)} ago" if c.last_poll else ""
        if c.lookup_error:
            lines.append(f"  {c.check}: cannot tell who serves {queue}: {c.lookup_error}")
        elif c.served:
            workers = f"{c.pollers} worker" + ("" if c.pollers == 1 else "s")
            lines.append(f"  {c.check}: {queue} is served by {workers} ({last})")
        else:
            instead = (
                f"mark it Active with admitflow admissioncheck activate {c.check}"
                if c.inactive
                else f"send the verdict with admitflow verdict {workload} {c.check} Ready|Retry|Rejected"
            )
            lines.append(f"  {c.check}: nobody is serving {queue}" + (f" ({last})" if last else "") + f"; {instead}")
    return lines


def trouble_lines(key: str, trouble: dict[str, Any], now: datetime | None = None) -> list[str]:
    """`describe workload` of a workload whose workflow does not answer: what Temporal knows of it
    (the `workflow` part of its object) and the ways out (docs/operations.md, A wedged workload)."""
    status = trouble.get("status", "")
    lines = [f"Status:       {status}: {trouble.get('message', '')}"]
    if trouble.get("failingSince"):
        cause = f" (Temporal's cause: {trouble['cause']})" if trouble.get("cause") else ""
        lines.append(f"  Failing Since:        {age(trouble['failingSince'], now)} ago{cause}")
    if trouble.get("lastFailure"):
        lines.append(f"  Last Failure:         {trouble['lastFailure']}")
    if trouble.get("lastGoodTask") is not None:
        lines.append(f"  Last Completed Task:  event {trouble['lastGoodTask']} of run {trouble.get('runId', '')}")
    held = ", ".join(
        f"{label} {trouble[field]}" for label, field in (("phase", "phase"), ("ClusterQueue", "clusterQueue"), ("LocalQueue", "localQueue")) if trouble.get(field)
    )
    if held:
        lines.append(f"  As Last Written:      {held} (its search attributes; nothing changes while its task fails)")
    if status == "TaskFailing":
        lines.append("Way Out:")
        lines.append(f"  once a worker without the fault runs:  admitflow reset workload {key}")
        lines.append(f"  to give its quota to others now:       admitflow release workload {key}")
    else:
        lines.append(f"Way Out:      start a worker on task queue {trouble.get('taskQueue', '')} (admitflow worker)")
    return lines
