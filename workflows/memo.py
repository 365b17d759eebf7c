"""A run's memo as it last wrote it (what the memo holds: admitflow/memos.py).

`publish(wanted)` upserts the keys whose values changed since this run last wrote them (a run
continued as new has written none: its first publish writes them all). With `every`, what is
wanted is computed, and written, at most once per `every`: a publish sooner is held back, and one
durable timer wakes the loop when it is due (`woke`); an entity that changes with every message
then writes its memo once per `every` at most, whatever the load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import memos


class Memo:
    def __init__(self, every: timedelta | None = None) -> None:
        self.every = every
        self.published: dict[str, Any] = {}
        self.computed_at: datetime | None = None
        self.timer: asyncio.Future[None] | None = None

    def woke(self) -> bool:
        """The timer of a held-back publish fired: publish again now."""
        return self.timer is not None and self.timer.done()

    def publish(self, wanted: Callable[[], dict[str, Any]]) -> None:
        now = workflow.now()
        if self.woke():
            self.timer = None
        if self.every is not None and self.computed_at is not None and now < self.computed_at + self.every:
            if self.timer is None:
                due = self.computed_at + self.every - now
                self.timer = asyncio.ensure_future(workflow.sleep(due, summary="write the memo read by lists and the exporter"))
            return
        self.computed_at = now
        changes = memos.upserts(wanted(), self.published)
        if not changes:
            return
        for chunk in memos.chunks(changes):
            workflow.upsert_memo(chunk)
        for key, value in changes.items():
            if value is None:
                self.published.pop(key, None)
            else:
                self.published[key] = value
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
