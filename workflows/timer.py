"""The one durable timer of a decide-then-execute loop (workflows/lifecycle.py, workflows/provisioning_attempt.py).

The loop's pure `next_wake` names the one moment it must wake without a message; `Timer` keeps one
Temporal timer for it, kept while that moment is unchanged (so one wait shows as one timer in the
UI), and remembers the deadline of the one that fired, which the loop steps as `TimerFired(at)`.
"""

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow


class Timer:
    def __init__(self) -> None:
        self.at: datetime | None = None
        self.task: asyncio.Task | None = None
        self.fired: datetime | None = None

    def set(self, wake: tuple[datetime, str] | None) -> None:
        """Wait for `wake` (a deadline and the timer's summary), or for nothing."""
        if self.task is not None and (wake is None or wake[0] != self.at):
            self.task.cancel()
            self.task = self.at = None
        if wake is None or self.task is not None:
            return
        at, summary = wake
        task = asyncio.ensure_future(workflow.sleep(max(at - workflow.now(), timedelta(milliseconds=1)), summary=summary))

        def fired(done: asyncio.Task) -> None:
            if self.task is done and not done.cancelled():
                self.task = self.at = None
                self.fired = at

        task.add_done_callback(fired)
        self.task, self.at = task, at

    def take(self) -> datetime | None:
        """The deadline of the timer that fired since the last call, if one did."""
        fired, self.fired = self.fired, None
        return fired
