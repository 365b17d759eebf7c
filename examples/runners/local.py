"""The local runner: runs each admitted workload as a local subprocess.

A workload (or its LocalQueue) names this runner with the annotation `admitflow.io/runner: local`
(the task queue it serves), and says what to run with `admitflow.io/command` (a shell command).
When the engine admits the workload it runs activity `start_workload` here:

- the command starts (`/bin/sh -c`) in its own process group, with the workload and its pods' start information
  (flavors' and checks' podSetUpdates merged) in the environment: `ADMITFLOW_WORKLOAD` (namespace/
  name), `ADMITFLOW_ADMISSION`, `ADMITFLOW_POD_SETS` (JSON);
- once it has started, the runner reports the workload's pods ready (`set_pods_ready`);
- while it runs, the activity heartbeats; when it exits, the runner reports `finish` with its exit
  code (0: succeeded) and the activity returns;
- on eviction the engine cancels the activity and runs `stop_workload`: the process group gets
  SIGTERM, then SIGKILL after a grace period, and no finish is reported;
- if the activity is cut off from Temporal (a server restart outlasts its heartbeat timeout) and
  its workflow still runs, the command runs on, as a node's pods run on when the node loses the
  API server: the engine counts the pods failed (`RunnerLost`) and starts the admission again; the
  new `start_workload` takes the running command over (no second copy), reports it ready and,
  when it exits, its finish. If the admission ends first, the engine's `stop_workload` stops it.
  If its workflow has ended, the command is stopped.

A workload a batch/v1 Job owns (made by `admitflow apply` or `create` from a Job) is run as its Job
says instead (`LocalJobs`): Kueue's job reconciler's writes to the stored Job (the podSet info into
its pod template, then resumed; suspended and restored again when the admission is over), and its
pods as Kubernetes' Job controller would run them, each container's `command` and `args` as a local
process (the image is named in the pod's log, not pulled), until `completions` pods succeeded or
more than `backoffLimit` failed; the Job's status goes to its store as pods start and end.

If the runner itself dies, its commands die with it (like a node going down: a small watchdog
beside each command kills its process group when the runner's end of its stdin closes), the
activity stops heartbeating, and the engine counts the pods as failed and starts the admission
again: a runner that serves the task queue in time runs the command anew; otherwise, under
WaitForPodsReady, the workload is evicted and requeued. A runner that shuts down (SIGINT, SIGTERM)
stops its commands at once, and the engine starts them again the same way.

    python examples/runners/local.py [--task-queue local] [--logs .admitflow/runs] [--address host:port]

Each command's output goes to `<logs>/<namespace>_<name>-<admission>.log`, each pod's of a Job to
`<logs>/<namespace>_<pod>.log`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from admitflow import contract, memos
from admitflow.activities.jobs.workloads import REPORT_PATIENCE, job_owner, patiently, workload_of
from admitflow.admission.pods_ready import PodsReadyReport
from admitflow.admission.protocol import FinishRequest, StartWorkload, StopWorkload

TASK_QUEUE = "local"
COMMAND_ANNOTATION = "admitflow.io/command"
HEARTBEAT_EVERY = 2.0  # seconds; the engine gives up on a runner after 10 s without one
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


@dataclass
class Run:
    process: asyncio.subprocess.Process
    admission: int
    stopped: bool = False
    taken_over: bool = False  # cut off from Temporal, then started again by the engine
    finish_told: bool = False  # by whichever of its activity or its `_outlive` saw the exit first


# Runs a program (argv) in the process group the runner made for it, and takes the whole group down
# when the runner dies: its end of stdin closes then, however it died (like a node going down). A
# workload's command runs as `/bin/sh -c COMMAND`, a Job's container as its command and args.
WATCHDOG = """
import os, signal, subprocess, sys, threading
def orphaned():
    while os.read(0, 1024):
        pass
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=orphaned, daemon=True).start()
try:
    code = subprocess.call(sys.argv[1:])
except OSError as err:
    print(f"exec {sys.argv[1]}: {err.strerror}", flush=True)
    os._exit(127)
os._exit(code if code >= 0 else 128 - code)
"""


class LocalRunner:
    def __init__(self, client: Client, logs: Path = Path(".admitflow/runs")) -> None:
        self.client = client
        self.logs = logs
        self.runs: dict[str, Run] = {}  # by workflow ID
        self.reports: set[asyncio.Future] = set()  # reports still being delivered, runs Temporal lost track of
        self.jobs = LocalJobs(client, logs)  # workloads of batch/v1 Jobs: their pods as processes

    def worker(self, task_queue: str = TASK_QUEUE) -> Worker:
        # Shutting down cancels the runs at once (no grace): their commands are stopped.
        return Worker(self.client, task_queue=task_queue, activities=[self.start_workload, self.stop_workload])

    @activity.defn(name=contract.START_WORKLOAD)
    async def start_workload(self, request: StartWorkload) -> FinishRequest | None:
        owner = job_owner(request.workload)
        if owner is not None:
            return await self.jobs.start(request, owner)
        meta = request.workload.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        command = (meta.get("annotations") or {}).get(COMMAND_ANNOTATION)
        handle = self.client.get_workflow_handle(request.workflow_id)
        run = self.runs.get(request.workflow_id)
        if run is not None and run.admission == request.admission and run.process.returncode is None:
            # The engine lost this run (cut off from Temporal, see below) and starts the admission
            # again: the command still runs here, so this activity takes it over.
            activity.logger.info("%s (admission %d): started again while its command runs: taken over", key, request.admission)
            run.taken_over = True
            return await self._watch(handle, run, key, request)
        if not command:
            await self._report(handle, contract.FINISH, FinishRequest(
                succeeded=False, message=f"nothing to run: the workload has no {COMMAND_ANNOTATION} annotation",
                admission=request.admission))
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{key.replace('/', '_')}-{request.admission}.log"
        env = {
            **os.environ,
            "ADMITFLOW_WORKLOAD": key,
            "ADMITFLOW_ADMISSION": str(request.admission),
            "ADMITFLOW_POD_SETS": json.dumps([p.to_wire() for p in request.pod_sets_info]),
        }
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", WATCHDOG, "/bin/sh", "-c", command, stdin=asyncio.subprocess.PIPE, stdout=log,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
            )
        run = self.runs[request.workflow_id] = Run(process=process, admission=request.admission)
        activity.logger.info("started %s (admission %d): pid %d, output in %s", key, request.admission, process.pid, log_path)
        await self._watch(handle, run, key, request)

    async def _watch(self, handle, run: Run, key: str, request: StartWorkload) -> None:
        """Report the command's pods ready, heartbeat until it exits, then report its finish."""
        try:
            await self._report(handle, contract.SET_PODS_READY, PodsReadyReport(ready=True, admission=request.admission))
            while True:
                activity.heartbeat()
                try:
                    await asyncio.wait_for(asyncio.shield(run.process.wait()), HEARTBEAT_EVERY)
                    break
                except TimeoutError:
                    continue
        except asyncio.CancelledError:
            if not cut_off():
                # The engine cancelled the run (the workload was evicted or deleted), or the runner shuts down.
                await self._stop(run)
                self._forget(request.workflow_id, run)
                raise
            # Cut off from Temporal: unless its workflow has ended, the command runs on, as a node's pods
            # run on when it loses the API server. The engine counts the pods failed meanwhile; it hears
            # them ready again, then the finish, or it says stop.
            activity.logger.warning("%s (admission %d): the run was cut off from Temporal", key, request.admission)
            self._deliver(self._outlive(handle, run, request.workflow_id, activity.info().workflow_run_id))
            raise
        self._forget(request.workflow_id, run)
        if not run.stopped:
            # Told even if this activity is cancelled meanwhile (a server restart can time it out): the
            # command did end, and the admission number keeps the report from ending a later admission.
            await asyncio.shield(self._deliver(self._finish(handle, run)))

    async def _outlive(self, handle, run: Run, workflow_id: str, run_id: str | None) -> None:
        try:
            if not await self._still_runs(self.client.get_workflow_handle(workflow_id, run_id=run_id)):
                await self._stop(run)  # its workflow ended (finished, deleted, terminated): nobody waits
                return
            activity.logger.warning("%s (admission %d): its workflow runs on, and so does the command", workflow_id, run.admission)
            if await self._heard_lost(handle, run):
                await self._report(handle, contract.SET_PODS_READY, PodsReadyReport(ready=True, admission=run.admission))
            await run.process.wait()
        finally:
            self._forget(workflow_id, run)
        if not run.stopped:
            await self._finish(handle, run)

    async def _still_runs(self, handle) -> bool:
        """Whether the workflow run that started the activity still runs, or continued as new (the
        workload lives on in the next run). When the server cannot say (not reached within
        REPORT_PATIENCE), taken as running: the engine's `stop_workload` still ends the command,
        and a finish nobody takes is dropped."""
        try:
            description = await patiently(lambda: handle.describe(rpc_timeout=timedelta(seconds=10)), "describe", handle.id)
        except RPCError as err:
            return err.status != RPCStatusCode.NOT_FOUND
        return description.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)

    async def _heard_lost(self, handle, run: Run) -> bool:
        """Wait until the engine has taken the lost run's pods for failed (PodsReady is not True),
        so that the ready report comes after it: a signal and the activity's timeout in one workflow
        task are applied signal first. False if the workload is no longer admitted, once the engine's
        new `start_workload` has taken the run over (it reports), or after REPORT_PATIENCE. It reads
        the workload's status from its workflow's memo (admitflow/memos.py), described every
        HEARTBEAT_EVERY: a runner never queries a workflow."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + REPORT_PATIENCE
        while loop.time() < give_up and not run.taken_over:
            try:
                description = await handle.describe(rpc_timeout=timedelta(seconds=10))
                report = memos.workload_report(await description.memo())
            except RPCError as err:
                activity.logger.warning("workload %s cannot be read (%s); reading again", handle.id, err)
            else:
                if report is not None:
                    if report.status.has_condition("Finished") or not report.status.has_condition("Admitted"):
                        return False
                    if not report.status.has_condition("PodsReady"):
                        return True
            await asyncio.sleep(HEARTBEAT_EVERY)
        return False

    async def _finish(self, handle, run: Run) -> None:
        if run.finish_told:
            return  # a run taken over after it was cut off: the other watcher told it
        run.finish_told = True
        code = run.process.returncode
        await self._report(handle, contract.FINISH, FinishRequest(
            succeeded=code == 0, message=f"command exited with code {code}" if code else "command succeeded",
            admission=run.admission,
        ))

    def _deliver(self, report) -> asyncio.Future:
        """Run a report on its own, beyond the activity that started it (kept until it is done)."""
        task = asyncio.ensure_future(report)
        self.reports.add(task)
        task.add_done_callback(self.reports.discard)
        return task

    def _forget(self, workflow_id: str, run: Run) -> None:
        if self.runs.get(workflow_id) is run:
            del self.runs[workflow_id]

    @activity.defn(name=contract.STOP_WORKLOAD)
    async def stop_workload(self, request: StopWorkload) -> None:
        if request.workflow_id not in self.runs and await self.jobs.stop(request):
            return
        run = self.runs.get(request.workflow_id)
        if run is not None and run.admission == request.admission:
            await self._stop(run)

    async def _stop(self, run: Run) -> None:
        """SIGTERM to the command's process group, SIGKILL after the grace period."""
        run.stopped = True
        if run.process.returncode is not None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
            try:
                os.killpg(run.process.pid, sig)
            except ProcessLookupError:
                return
            if grace is None:
                break
            try:
                await asyncio.wait_for(asyncio.shield(run.process.wait()), grace)
                return
            except TimeoutError:
                continue
        await run.process.wait()

    async def _report(self, handle, signal_name: str, payload) -> None:
        """Signal the workload; while the server cannot be reached (a restart), try again for up to
        REPORT_PATIENCE, heartbeating: giving up would lose the run. A report that arrives twice
        changes nothing the second time (the workload is ready, or has finished and is gone)."""
        try:
            await patiently(lambda: handle.signal(signal_name, payload), signal_name, handle.id)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            activity.logger.warning("workload %s is gone; %s not reported", handle.id, signal_name)


def cut_off() -> bool:
    """Whether this activity was cancelled because it timed out or the server no longer knows it,
    not because the engine asked or the worker shuts down. Either happens when a server restart
    outlasts the heartbeat timeout (which flags come first is a race), and the second also when
    its workflow has ended: `LocalRunner._outlive` asks which."""
    details = activity.cancellation_details()
    return details is not None and (details.timed_out or details.not_found) and not (
        details.cancel_requested or details.worker_shutdown
    )


# --- batch/v1 Jobs: their pods as local processes ------------------------------------------------

NO_COMMAND_EXIT = 127  # what a container whose entrypoint cannot be found exits with


@dataclass
class Pod:
    name: str
    index: int | None
    processes: list[asyncio.subprocess.Process]
    done: asyncio.Task


class JobPods:
    """One admission of a Job run here: its pods as processes, as many as Kubernetes' Job
    controller would run (admitflow.jobs.job_controller), each container's `command` and `args`.
    Its status (active, ready, succeeded, failed, completedIndexes, the Complete or Failed
    condition) goes to the Job's store as the pods start and end, and the workload hears when its
    pods are ready and when the Job ends."""

    def __init__(self, runner: LocalJobs, request: StartWorkload, job, namespace: str, name: str) -> None:
        self.runner, self.request, self.job = runner, request, job
        self.namespace, self.name = namespace, name
        self.pods: dict[str, Pod] = {}
        self.ready_told: bool | None = None

    async def run(self) -> FinishRequest:
        from admitflow.jobs import batch_job, job_controller

        handle = self.runner.client.get_workflow_handle(self.request.workflow_id)
        # Pods that ran before this admission started here are gone (a new admission, or a runner
        # started again): none is active.
        await self._write_status()
        try:
            while True:
                condition = job_controller.ending(self.job, datetime.now(UTC))
                if condition is not None or job_controller.finished(self.job):
                    if condition is not None:
                        await self._write_status(condition)
                    ended = batch_job.finished(self.job)
                    activity.logger.info("job %s/%s ended: %s", self.namespace, self.name, ended.message if ended else "")
                    return FinishRequest(succeeded=ended.succeeded, message=ended.message, admission=self.request.admission)
                started = await self._start_pods(job_controller.pods_wanted(self.job))
                if started:
                    await self._write_status()
                await self._tell_ready(handle, batch_job.pods_ready(self.job))
                if not self.pods:
                    # Nothing runs and nothing may start (its failures passed the backoff limit
                    # with pods still active a moment ago): the next turn ends it.
                    continue
                activity.heartbeat()
                finished, _ = await asyncio.wait([p.done for p in self.pods.values()], timeout=HEARTBEAT_EVERY,
                                                 return_when=asyncio.FIRST_COMPLETED)
                if finished:
                    await self._reap()
        except asyncio.CancelledError:
            # Evicted, deleted, or the runner shuts down: the pods stop, and no longer count as active.
            await asyncio.shield(self._stop_all())
            raise

    async def _start_pods(self, wanted: int) -> int:
        from admitflow.jobs import job_controller

        indexed = self.job.spec.completion_mode == "Indexed"
        running = {p.index for p in self.pods.values() if p.index is not None}
        slots: list[int | None] = job_controller.indexes_wanted(self.job, running, wanted) if indexed else [None] * wanted
        for index in slots:
            pod = await self._start_pod(index)
            self.pods[pod.name] = pod
        return len(slots)

    async def _start_pod(self, index: int | None) -> Pod:
        suffix = "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = f"{self.name}-{index}-{suffix}" if index is not None else f"{self.name}-{suffix}"
        self.runner.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.runner.logs / f"{self.namespace}_{name}.log"
        template = self.job.spec.template.to_wire()
        env = {
            **os.environ,
            "ADMITFLOW_WORKLOAD": f"{self.namespace}/{self.request.workload['metadata']['name']}",
            "ADMITFLOW_ADMISSION": str(self.request.admission),
            "ADMITFLOW_POD_SETS": json.dumps([p.to_wire() for p in self.request.pod_sets_info]),
            "ADMITFLOW_JOB": f"{self.namespace}/{self.name}",
            "ADMITFLOW_POD": name,
            "HOSTNAME": name,
        }
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        processes = []
        with log_path.open("ab") as log:
            for container in template["spec"]["containers"]:
                command = [*(container.get("command") or ()), *(container.get("args") or ())]
                header = (f"# pod {self.namespace}/{name}, container {container['name']}: image {container.get('image', '?')} "
                          "(not pulled: its command runs on this machine)\n")
                log.write(header.encode())
                log.flush()
                if not container.get("command"):
                    log.write((f"error: container {container['name']} has no command: the local runner does not know "
                               f"the entrypoint of image {container.get('image', '?')}; give the container a command\n").encode())
                    log.flush()
                    processes.append(None)
                    continue
                container_env = {**env, **{e["name"]: e.get("value", "") for e in container.get("env") or () if "valueFrom" not in e}}
                processes.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-c", WATCHDOG, *command, stdin=asyncio.subprocess.PIPE, stdout=log,
                    stderr=asyncio.subprocess.STDOUT, env=container_env, start_new_session=True,
                ))
        activity.logger.info("started pod %s/%s of job %s (admission %d), output in %s", self.namespace, name, self.name,
                             self.request.admission, log_path)
        return Pod(name=name, index=index, processes=[p for p in processes if p is not None],
                   done=asyncio.ensure_future(_pod_exit(processes)))

    async def _reap(self) -> None:
        """Count the pods that ended: succeeded when every container exited 0, else failed."""
        from admitflow.jobs import job_controller

        status = self.job.status
        succeeded, failed = status.succeeded or 0, status.failed or 0
        completed = job_controller.parse_indexes(status.completed_indexes or "")
        for name, pod in list(self.pods.items()):
            if not pod.done.done():
                continue
            del self.pods[name]
            code = pod.done.result()
            activity.logger.info("pod %s/%s of job %s exited with code %d", self.namespace, name, self.name, code)
            if code == 0:
                succeeded += 1
                if pod.index is not None:
                    completed.add(pod.index)
            else:
                failed += 1
        update = {"succeeded": succeeded or None, "failed": failed or None,
                  "completed_indexes": job_controller.format_indexes(completed) or None}
        self.job = self.job.model_copy(update={"status": status.model_copy(update=update)})
        await self._write_status()

    async def _write_status(self, condition=None) -> None:
        """The pods' counts (and the condition that ends the Job, with its completionTime) to the store."""
        from admitflow.activities.jobs import reconciler

        mine = self.job.status
        active = len(self.pods) or None

        def change(job):
            conditions = list(job.status.conditions or ())
            update = {"active": active, "ready": active, "succeeded": mine.succeeded, "failed": mine.failed,
                      "completed_indexes": mine.completed_indexes}
            if condition is not None:
                conditions.append(condition)
                update.update(conditions=conditions, completion_time=condition.last_transition_time if condition.type == "Complete" else None)
            return job.model_copy(update={"status": job.status.model_copy(update=update)})

        self.job = await patiently(lambda: reconciler.update_status(self.runner.api, self.namespace, self.name, change),
                                   "job status", self.name)

    async def _tell_ready(self, handle, ready: bool) -> None:
        if ready != self.ready_told:
            self.ready_told = ready
            await patiently(lambda: handle.signal(contract.SET_PODS_READY, PodsReadyReport(ready=ready, admission=self.request.admission)),
                            contract.SET_PODS_READY, handle.id)

    async def _stop_all(self) -> None:
        for pod in list(self.pods.values()):
            for process in pod.processes:
                await stop_process_group(process)
        self.pods.clear()
        try:
            await self._write_status()
        except Exception as err:  # noqa: BLE001 - the store cannot be reached: the next admission counts afresh
            activity.logger.warning("job %s/%s: its status could not be written (%s)", self.namespace, self.name, err)


async def _pod_exit(processes: list) -> int:
    """A pod's exit code: the first container's that failed, 0 when all succeeded."""
    codes = [NO_COMMAND_EXIT if p is None else await p.wait() for p in processes]
    return next((c for c in codes if c != 0), 0)


async def stop_process_group(process: asyncio.subprocess.Process) -> None:
    """SIGTERM to the process group, SIGKILL after STOP_GRACE."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), STOP_GRACE)
            return
        except TimeoutError:
            continue


class LocalJobs:
    """The local runner for workloads a batch/v1 Job owns (admitflow's stored Jobs, activities.jobs):
    on `start_workload` it does what Kueue's job reconciler does (the admission's podSet info into
    the Job's template, then resume it: activities.jobs.reconciler.start_job), then what the Job
    controller and the kubelet would (JobPods); on `stop_workload` it stops the pods and suspends
    the Job again with its template restored (reconciler.stop_job)."""

    def __init__(self, client: Client, logs: Path) -> None:
        from admitflow.activities.jobs.stored import StoredJobs

        self.client, self.logs = client, logs
        self.api = StoredJobs(client)
        self.running: dict[str, JobPods] = {}  # by workflow ID

    async def start(self, request: StartWorkload, owner: dict) -> FinishRequest | None:
        from admitflow.activities.jobs import reconciler
        from admitflow.activities.jobs.api import JobNotFound
        from admitflow.admission.pod_set_updates import PodSetUpdateConflict
        from admitflow.api.workload import Workload
        from admitflow.jobs.batch_job import PodSetInfoError

        namespace, name = request.workload["metadata"]["namespace"], owner["name"]
        workload = Workload.model_validate(request.workload)
        try:
            sent = await reconciler.start_job(self.api, namespace, name, request.pod_sets_info, workload, uid=owner.get("uid"))
        except (PodSetUpdateConflict, PodSetInfoError) as err:
            # Kueue's FailedToStart: the admission cannot be applied to this Job.
            return FinishRequest(succeeded=False, message=str(err), admission=request.admission)
        except JobNotFound:
            # Gone, or another Job of the same name made since: the Workload's own is gone.
            return FinishRequest(succeeded=False, message=f"its Job {namespace}/{name} is gone", admission=request.admission)
        activity.logger.info("job %s/%s resumed for admission %d (%d requests)", namespace, name, request.admission, sent.requests)
        run = self.running[request.workflow_id] = JobPods(self, request, sent.job, namespace, name)
        try:
            return await run.run()
        finally:
            if self.running.get(request.workflow_id) is run:
                del self.running[request.workflow_id]

    async def stop(self, request: StopWorkload) -> bool:
        """Suspend the Job of the workload again; False when the workload is not a Job's."""
        from admitflow.activities.jobs import reconciler
        from admitflow.activities.jobs.api import JobNotFound

        workload = await workload_of(self.client, request.workflow_id)
        owner = job_owner(workload.to_wire()) if workload is not None else None
        if owner is None:
            return False
        run = self.running.pop(request.workflow_id, None)
        if run is not None:
            await run._stop_all()
        try:
            sent, stopped_now = await reconciler.stop_job(
                self.api, workload.metadata.namespace, owner["name"], workload.spec.pod_sets, uid=owner.get("uid")
            )
        except JobNotFound:
            return True
        if stopped_now:
            activity.logger.info("job %s/%s stopped: %s (%d requests)", workload.metadata.namespace, owner["name"],
                                 request.message or request.reason, sent.requests)
        return True


def main(argv: list[str] | None = None) -> None:
    from admitflow.worker import connection
    from admitflow.worker.logging import configure
    from admitflow.worker.main import run_until_signalled

    p = argparse.ArgumentParser(description="run admitted workloads as local subprocesses")
    p.add_argument("--task-queue", default=TASK_QUEUE, help=f"the runner's task queue, as annotations name it (default {TASK_QUEUE})")
    p.add_argument("--logs", default=".admitflow/runs", help="where each command's output goes (default .admitflow/runs)")
    connection.add_arguments(p)
    args = p.parse_args(argv)
    configure("INFO")

    async def serve() -> None:
        client = await connection.connect_or_exit(args)
        print(f"local runner (pid {os.getpid()}) serving task queue {args.task_queue!r}", flush=True)
        await run_until_signalled(LocalRunner(client, Path(args.logs)).worker(args.task_queue))

    asyncio.run(serve())
    # The Temporal SDK's native runtime can abort the interpreter while it finalizes
    # (sdk-python#300, `PyGILState_Release`); everything has stopped, so leave without that.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
