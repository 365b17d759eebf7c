"""How the CLI shows objects: kubectl's tables (`-o wide` adds columns), `-o name`, `describe`
layout, and json/yaml.

Light on purpose: yaml and the API models are imported only by what needs them, so that the
command starts fast.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from admitflow.kinds import NAMESPACED, qualified

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
    # Kueue's Cohort CRD has no printer columns (kubectl shows NAME, AGE); PARENT is what a reader
    # of a cohort tree asks first.
    "Cohort": (
        ["NAME", "PARENT", "AGE"],
        lambda o: [
            _meta(o, "name"),
            (o.get("spec") or {}).get("parentName") or "",
            age(_meta(o, "creationTimestamp")),
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
    # Kueue's printer column: the value.
    "WorkloadPriorityClass": (["NAME", "VALUE"], lambda o: [_meta(o, "name"), str(o.get("value", ""))]),
    # kubectl's columns for scheduling.k8s.io PriorityClasses.
    "PriorityClass": (
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        lambda o: [
            _meta(o, "name"),
            str(o.get("value", "")),
            "true" if o.get("globalDefault") else "false",
            age(_meta(o, "creationTimestamp")),
            o.get("preemptionPolicy") or "",
        ],
    ),
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
    # kubectl's columns for batch/v1 Jobs.
    "Job": (
        ["NAMESPACE", "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        lambda o: [_meta(o, "namespace"), _meta(o, "name"), job_status(o), job_completions(o), job_duration(o),
                   age(_meta(o, "creationTimestamp"))],
    ),
}


def job_status(o: dict[str, Any]) -> str:
    """kubectl's STATUS of a Job: its first condition that holds, in kubectl's order, else Running."""
    held = {c.get("type") for c in (o.get("status") or {}).get("conditions") or () if c.get("status") == "True"}
    if (o.get("metadata") or {}).get("deletionTimestamp") and not held & {"Complete", "Failed"}:
        return "Terminating"
    order = ("Complete", "Failed", "Suspended", "FailureTarget", "SuccessCriteriaMet")
    return next((t for t in order if t in held), "Running")


def job_completions(o: dict[str, Any]) -> str:
    """kubectl's COMPLETIONS: succeeded/completions, or `n/1 of parallelism` without completions."""
    spec, status = o.get("spec") or {}, o.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism", 1)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def job_duration(o: dict[str, Any], now: datetime | None = None) -> str:
    """kubectl's DURATION: from startTime to completionTime, or to now while it runs."""
    status = o.get("status") or {}
    if not status.get("startTime"):
        return ""
    start = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(status["completionTime"].replace("Z", "+00:00")) if status.get("completionTime") else None
    return age(start.isoformat(), end or now)

def _names(items: Sequence[dict[str, Any]] | None) -> str:
    return ",".join(i.get("name", "") for i in items or ()) or "<none>"


def _workload_priority(o: dict[str, Any]) -> str:
    return str((o.get("spec") or {}).get("priority") or 0)


def _pending_checks(o: dict[str, Any]) -> str:
    """The checks not Ready yet: from visibility (`pendingChecks`), else from the status."""
    if "pendingChecks" in o:
        names = o["pendingChecks"]
    else:
        names = [c.get("name", "") for c in (o.get("status") or {}).get("admissionChecks") or () if c.get("state") != "Ready"]
    return ",".join(names) or "<none>"


def _resource_group_flavors(o: dict[str, Any]) -> str:
    groups = (o.get("spec") or {}).get("resourceGroups") or ()
    return ",".join(dict.fromkeys(f.get("name", "") for g in groups for f in g.get("flavors") or ())) or "<none>"


def _cq_checks(o: dict[str, Any]) -> str:
    strategy = (o.get("spec") or {}).get("admissionChecksStrategy") or {}
    return _names(strategy.get("admissionChecks"))


def _fair_sharing_weight(o: dict[str, Any]) -> str:
    return str(((o.get("spec") or {}).get("fairSharing") or {}).get("weight") or 1)


def _active_message(o: dict[str, Any]) -> str:
    c = _condition(o, "Active")
    return (c or {}).get("message") or ""


# `-o wide`: columns added after the default ones (Kueue's printer columns of priority 1, and a
# few more a Kueue admin reads often). Kinds not named here print the same as the default table.
WIDE: dict[str, tuple[list[str], Row]] = {
    "Workload": (["PRIORITY", "PENDING CHECKS"], lambda o: [_workload_priority(o), _pending_checks(o)]),
    "ClusterQueue": (["FLAVORS", "ADMISSION CHECKS", "AGE"], lambda o: [_resource_group_flavors(o), _cq_checks(o), age(_meta(o, "creationTimestamp"))]),
    "Cohort": (["FLAVORS", "WEIGHT"], lambda o: [_resource_group_flavors(o), _fair_sharing_weight(o)]),
    "LocalQueue": (
        ["RESERVING WORKLOADS", "AGE"], lambda o: [_count(o, "reservingWorkloads"), age(_meta(o, "creationTimestamp"))]
    ),
    "ResourceFlavor": (["NODE LABELS"], lambda o: [_pairs((o.get("spec") or {}).get("nodeLabels")) or "<none>"]),
    "WorkloadPriorityClass": (["AGE", "DESCRIPTION"], lambda o: [age(_meta(o, "creationTimestamp")), o.get("description") or ""]),
    "AdmissionCheck": (
        ["PARAMETERS", "MESSAGE"],
        lambda o: [((o.get("spec") or {}).get("parameters") or {}).get("name") or "<none>", _active_message(o)],
    ),
}

# The column `get workloads` adds when a workload's workflow does not answer (and `-o wide`
# always): its phase, or why it cannot be asked (TaskFailing, NotAnswering).
STATUS = "STATUS"


def workload_status(o: dict[str, Any]) -> str:
    """A workload's STATUS: why its workflow cannot be asked, else its phase (visibility's `phase`
    when the object came from there, else told from its status)."""
    trouble = o.get("workflow")
    if trouble:
        return trouble.get("status") or ""
    if o.get("phase"):
        return o["phase"]
    from admitflow.admission import workload as wl

    report = wl.WorkloadReport.model_validate_json(json.dumps(o))
    return wl.phase(wl.WorkloadState(workload=report))


def columns(kind: str, objects: Sequence[dict[str, Any]], wide: bool = False, namespaced: bool = True) -> tuple[list[str], Row]:
    """The table's headers and row: COLUMNS, with WIDE's after them for `-o wide`; for workloads a
    STATUS column (last) when one of them does not answer (the others show their phase there), or
    always with `-o wide`. `namespaced=False` leaves out the NAMESPACE column: the list is of one
    namespace, as kubectl shows it without `-A`."""
    headers, row = COLUMNS[kind]
    if wide and kind in WIDE:
        extra_headers, extra = WIDE[kind]
        headers, row = [*headers, *extra_headers], (lambda o, base=row, more=extra: [*base(o), *more(o)])
    if kind == "Workload" and (wide or any(o.get("workflow") for o in objects)):
        headers, row = [*headers, STATUS], (lambda o, base=row: [*base(o), workload_status(o)])
    if not namespaced and headers[0] == "NAMESPACE":
        headers, row = headers[1:], (lambda o, base=row: base(o)[1:])
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


def watch_rows(
    kind: str, objects: list[dict[str, Any]], shown: dict[str, list[str]], row: Row | None = None, age_column: int | None = None
) -> list[list[str]]:
    """`get -w`: the rows of objects that are new or changed since `shown` (updated in place), as
    kubectl prints them, one line per change; an AGE cell growing older is not a change."""
    row = row or COLUMNS[kind][1]
    changed = []
    for obj in objects:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        current = row(obj)
        compared = [c for i, c in enumerate(current) if i != age_column]
        if shown.get(key) != compared:
            shown[key] = compared
            changed.append(current)
    return changed


def no_resources(namespace: str | None = None) -> str:
    """kubectl's line (on stderr) for a list that found nothing."""
    return f"No resources found in {namespace} namespace." if namespace else "No resources found."


def names(kind: str, objects: Sequence[dict[str, Any]]) -> list[str]:
    """`-o name`: `kind.group/key`, one per object (`workload.kueue.x-k8s.io/team-a/train`)."""
    out = []
    for o in objects:
        key = "config" if kind == "Configuration" else _meta(o, "name")  # the Configuration's one key
        if kind in NAMESPACED:
            key = f"{_meta(o, 'namespace')}/{key}"
        out.append(qualified(kind, key))
    return out


def render(kind: str, objects: list[dict[str, Any]], output: str, single: bool, namespaced: bool = True) -> str:
    """The objects as `output` says: table, wide, name, json or yaml. An empty table (or name list)
    is the empty string: kubectl says "No resources found" on stderr instead (`no_resources`)."""
    if output in ("table", "wide"):
        if not objects:
            return ""
        headers, row = columns(kind, objects, wide=output == "wide", namespaced=namespaced)
        return table(headers, [row(o) for o in objects])
    if output == "name":
        return "\n".join(names(kind, objects))
    doc: Any = objects[0] if single else {"apiVersion": "v1", "kind": "List", "items": objects}
    if output == "json":
        return json.dumps(doc, indent=2)
    import yaml

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
    # A kind without a spec keeps its fields at the top level (a WorkloadPriorityClass's value and
    # description): kubectl describe shows them beside the kind.
    for key, value in obj.items() if "spec" not in obj else ():
        if key not in ("apiVersion", "kind", "metadata", "status") and not isinstance(value, (dict, list)):
            lines.append(f"{(_title(key) + ':').ljust(13)} {value}")
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


# --- admitflow explain (admitflow/admission/explain.py) ----------------------------------------------

# Causes whose estimate rests on the model of the queue, and so is shown with what it assumes.
_QUEUE_CAUSES = ("NoQuota", "Queued")
# Workloads named per cause in `explain clusterqueue`'s table; -o json lists them all.
_NAMED_PER_CAUSE = 3


def explanation_lines(e: dict[str, Any], now: datetime | None = None) -> list[str]:
    """`explain workload`: its one cause and what says it, then the estimate."""
    c = e.get("cause") or {}
    lines = [f"Workload:   {e.get('workload', '')}", f"Cause:      {c.get('cause', '')}", f"Why:        {c.get('summary', '')}"]
    if c.get("condition"):
        said = " ".join(p for p in (c["condition"], c.get("reason", "")) if p)
        lines.append(f"Kueue:      {said}" + (f": {c['message']}" if c.get("message") else ""))
    if c.get("since"):
        lines.append(f"Since:      {c['since']} ({age(c['since'], now)} ago)")
    for ch in c.get("checks") or ():
        since = f" since {ch['since']}" if ch.get("since") else ""
        lines.append(f"Check:      {ch['name']} {ch['state']}{since}" + (f": {ch['message']}" if ch.get("message") else ""))
    if c.get("gates"):
        lines.append(f"Gates:      {', '.join(c['gates'])}")
    for s in c.get("shortfalls") or ():
        if s.get("kind") == "capacity":
            lack = f"{s['requested']} {s['resource']} asked, {s['capacity']} at most"
        else:
            lack = f"{s['moreNeeded']} more {s['resource']} needed"
        lines.append(f"Lacks:      flavor {s['flavor']}, pod set {s['podSet']}: {lack}")
    if c.get("position") is not None:
        where = f" {c['clusterQueue']}" if c.get("clusterQueue") else ""
        in_lq = c.get("positionInLocalQueue")
        lq = f", {in_lq} in LocalQueue {c.get('localQueue', '')}" if in_lq is not None else ""
        lines.append(f"Position:   {c['position']} in ClusterQueue{where}{lq}")
    lines.append(f"Estimate:   {estimate_words(e.get('estimate') or {}, now)}")
    if c.get("cause") in _QUEUE_CAUSES and (e.get("estimate") or {}).get("at"):
        lines.append(f"Assumes:    {e.get('assumptions', '')}")
    return lines


def estimate_words(est: dict[str, Any], now: datetime | None = None) -> str:
    at = est.get("at")
    if not at:
        return f"unknown: {est['unknown']}" if est.get("unknown") else "unknown"
    then = datetime.fromisoformat(at.replace("Z", "+00:00"))
    seconds = int((then - (now or datetime.now(UTC))).total_seconds())
    when = at + (f" (in {_short(seconds)})" if seconds > 0 else "")
    return f"{when}: {est['basis']}" if est.get("basis") else when


def _short(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def cause_table(q: dict[str, Any]) -> str:
    """`explain clusterqueue`: its waiting workloads counted by cause, then the total."""
    rows = []
    for count in q.get("causes") or ():
        named = count.get("workloads") or []
        shown = ", ".join(named[:_NAMED_PER_CAUSE]) + (f", ... (+{len(named) - _NAMED_PER_CAUSE})" if len(named) > _NAMED_PER_CAUSE else "")
        rows.append([count["cause"], str(count["count"]), shown])
    rows.append(["TOTAL", str(q.get("total", 0)), ""])
    return table(["CAUSE", "COUNT", "WORKLOADS"], rows)
