"""Heartbeats for activities whose work is a few calls that usually take milliseconds.

Without a heartbeat, the server notices a worker that died in the middle of such an activity only
when the activity's start-to-close timeout runs out (a minute or two), and only then gives the task
to another worker. Scheduled with a short heartbeat timeout and run inside `heartbeating`, the
activity is tried again elsewhere that timeout after the death, while a slow call on a live worker
(a loaded API server) keeps beating and is bounded by the start-to-close timeout alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity

# This many beats per heartbeat timeout. The first comes after a quarter of the timeout: nearly
# every call ends sooner and costs the server no heartbeat at all.
BEATS_PER_TIMEOUT = 4


@asynccontextmanager
async def heartbeating(progress: Callable[[], Any] | None = None) -> AsyncIterator[None]:
    """Heartbeat, with `progress()` as the details when given, while the block runs. An activity
    scheduled without a heartbeat timeout sends none: nobody waits for one."""
    beating = asyncio.ensure_future(_beat(progress))
    try:
        yield
    finally:
        beating.cancel()


async def _beat(progress: Callable[[], Any] | None) -> None:
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return
    while True:
        await asyncio.sleep(timeout.total_seconds() / BEATS_PER_TIMEOUT)
        if progress is None:
            activity.heartbeat()
        else:
            activity.heartbeat(progress())
