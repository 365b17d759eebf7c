"""The shared informer's change notices (activities/informer.py, `on_change`): every new state of
an object and every object gone, from watch events and from a list that finds what the watch
missed, and nothing for what a list finds as it was."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from admitflow.activities.informer import Expired, Informer, Page


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


class Script:
    """A Source that lists `listed` and then plays one watch's events per entry of `watches`
    (an entry `Expired` ends that watch with 410 Gone); after the last one it waits."""

    def __init__(self, listed: list[list[dict]], watches: list[list[dict] | type]) -> None:
        self.listed, self.watches = listed, watches
        self.done = asyncio.Event()

    async def list(self, continue_token: str | None) -> Page:
        items = self.listed.pop(0)
        return Page(items=items, resource_version=str(max((int(o["metadata"]["resourceVersion"]) for o in items), default=1)))

    async def watch(self, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        events = self.watches.pop(0)
        if events is Expired:
            raise Expired("too old")
        for event in events:
            yield event


async def run(script: Script) -> list[tuple[str, str | None]]:
    seen: list[tuple[str, str | None]] = []
    informer = Informer(script, on_change=lambda key, o: seen.append((key[1], o and o["metadata"]["resourceVersion"])))
    informer.start()
    try:
        await asyncio.wait_for(script.done.wait(), 5)
    finally:
        await informer.close()
    return seen


async def test_watch_events_are_passed_on_and_a_stale_or_repeated_one_is_not():
    script = Script(
        [[obj("a", 5)]],
        [[
            {"type": "MODIFIED", "object": obj("a", 6)},
            {"type": "ADDED", "object": obj("b", 7)},
            {"type": "MODIFIED", "object": obj("a", 4)},  # older than the store's: dropped
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}},
            {"type": "DELETED", "object": obj("b", 9)},
        ]],
    )
    assert await run(script) == [("a", "5"), ("a", "6"), ("b", "7"), ("b", None)]


async def test_a_list_after_410_reports_only_what_changed_or_went_while_the_watch_was_down():
    script = Script(
        [[obj("a", 5), obj("b", 6), obj("c", 7)], [obj("a", 5), obj("c", 9), obj("d", 10)]],
        [Expired],
    )
    seen = await run(script)
    assert seen[:3] == [("a", "5"), ("b", "6"), ("c", "7")], "the first list: everything"
    assert sorted(seen[3:], key=str) == [("b", None), ("c", "9"), ("d", "10")], "a unchanged; b gone; c changed; d new"
