"""One watch of a whole resource, shared by everyone who waits for one of its objects: what
client-go calls an informer (a reflector and its store), reduced to what the `kubernetes`
ProvisioningRequest backend and the Kubernetes runner need.

- It lists the resource (in pages, from one consistent snapshot), keeps the objects by namespace
  and name, and watches from the list's resourceVersion; every event moves the store and the
  position (the resourceVersion the store is at) forward, as do BOOKMARK events.
- A watch the server ends (its `timeoutSeconds`) is opened again from the position; one that breaks
  (`Disconnected`) too, after a backoff. `Expired` (410 Gone: the position fell out of the server's
  watch window) lists again at once (after the backoff when the list itself is not a second old);
  any other failure lists again after the backoff.
- `wait_for(key, resource_version)` answers with the first state of the object newer than that
  version, or None once the store is past that version and the object is not in it (deleted).
- `on_change(key, obj)`, when given, is called for every object the store holds in a new state,
  and with None for every object it no longer holds: by a watch event, or by a list that found it
  changed or gone (an event missed while the watch was down). A list that finds an object as it
  was calls nothing.

Resource versions are compared as integers: the Kubernetes API defines them as comparable for
every resource kube-apiserver serves, custom resources included (KEP-5504, stable in 1.35; before
that every kube-apiserver already used etcd's revision). Where one is not an integer (an extension
API server), any other version counts as newer, and absence is never taken for deletion.

This module knows nothing of HTTP: its owner gives it a `Source` (activities/kubernetes_api.py
lists and watches a collection).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

log = structlog.get_logger("admitflow.kubernetes")

Key = tuple[str, str]  # (namespace, name)


class Expired(Exception):
    """410 Gone: the resourceVersion asked for is older than the server keeps; list again."""


class Disconnected(Exception):
    """The watch's connection broke or went silent; watch again from where the store is."""


@dataclass
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None = None


class Source(Protocol):
    async def list(self, continue_token: str | None) -> Page:
        """One page of the resource in all namespaces; the first one when `continue_token` is None."""
        ...

    def watch(self, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        """The events after `resource_version` (`{"type", "object"}`), until the server ends the
        watch. Raises `Expired` for 410 Gone, `Disconnected` when the connection fails."""
        ...


def version(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def newer(a: str | None, b: str | None) -> bool:
    """Whether resourceVersion `a` is later than `b` (see the module doc)."""
    x, y = version(a), version(b)
    if x is not None and y is not None:
        return x > y
    return a != b


def reached(position: str | None, target: str | None) -> bool:
    """Whether a store at `position` has seen everything up to `target`; False when unknown."""
    x, y = version(position), version(target)
    return x is not None and y is not None and x >= y


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _rv(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


@dataclass
class Backoff:
    """Jittered exponential delays between failed attempts: 0.2 s, 0.4 s, ... up to `most`."""

    first: float = 0.2
    most: float = 30.0
    failures: int = field(default=0)

    def next(self) -> float:
        self.failures += 1
        delay = min(self.most, self.first * 2 ** (self.failures - 1))
        return delay * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.failures = 0


class Informer:
    """See the module doc. `start()` inside the event loop that will use it; `close()` at the end.
    `on_stop` runs when the informer stops, by `close()` or because its event loop is ending (a
    worker that exits without closing its backend): its owner's connections can go with it.
    `on_change` must not block: it runs inside the informer's loop."""

    def __init__(
        self,
        source: Source,
        *,
        what: str = "objects",
        backoff: Backoff | None = None,
        on_stop: Callable[[], Awaitable[None]] | None = None,
        on_change: Callable[[Key, dict[str, Any] | None], None] | None = None,
    ) -> None:
        self._source = source
        self._what = what
        self._on_stop = on_stop
        self._on_change = on_change
        self._backoff = backoff or Backoff()
        self._store: dict[Key, dict[str, Any]] = {}
        self._position: str | None = None
        self._synced = False
        self._waiters: dict[Key, dict[asyncio.Future[dict[str, Any] | None], str]] = {}
        self._task: asyncio.Task[None] | None = None
        # The outcome of the list under way (None: it was stored); read by `sync`.
        self._listing: asyncio.Future[None] | None = None
        # Set to cut a backoff short: someone is waiting for the first list.
        self._hurry = asyncio.Event()
        self.lists = 0
        self.watches = 0

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer {self._what}")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for waiters in self._waiters.values():
            for future in waiters:
                future.cancel()
        self._waiters.clear()

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def position(self) -> str | None:
        return self._position

    async def sync(self, timeout: float) -> bool:
        """Wait until the store holds a first list; False after `timeout`. A list that fails
        before then raises its error here (the next call starts another at once)."""
        self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._synced:
            if self._listing is None or self._listing.done():
                self._listing = loop.create_future()
            listing = self._listing
            self._hurry.set()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            done, _ = await asyncio.wait({listing}, timeout=remaining)
            if not done:
                return False
            listing.result()
        return True

    # --- waiting ---------------------------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        return self._store.get(key)

    def keys(self) -> list[Key]:
        return list(self._store)

    def wait_for(self, key: Key, resource_version: str) -> asyncio.Future[dict[str, Any] | None]:
        """A future of the object's first state newer than `resource_version`, or of None when it
        is gone. Give it back with `forget` if you stop waiting."""
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        decided, obj = self._answer(key, resource_version)
        if decided:
            future.set_result(obj)
        else:
            self._waiters.setdefault(key, {})[future] = resource_version
        return future

    def forget(self, key: Key, future: asyncio.Future[Any]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.pop(future, None)
            if not waiters:
                del self._waiters[key]

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def _answer(self, key: Key, resource_version: str) -> tuple[bool, dict[str, Any] | None]:
        obj = self._store.get(key)
        if obj is not None:
            return (True, obj) if newer(_rv(obj), resource_version) else (False, None)
        if self._synced and reached(self._position, resource_version):
            return True, None
        return False, None

    def _notify(self, key: Key) -> None:
        waiters = self._waiters.get(key)
        if not waiters:
            return
        for future, resource_version in list(waiters.items()):
            decided, obj = self._answer(key, resource_version)
            if decided:
                del waiters[future]
                if not future.done():
                    future.set_result(obj)
        if not waiters:
            del self._waiters[key]

    def _notify_all(self) -> None:
        for key in list(self._waiters):
            self._notify(key)

    # --- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._loop()
        finally:
            if self._on_stop is not None:
                await self._on_stop()

    async def _loop(self) -> None:
        delay = 0.0
        while True:
            if delay:
                self._hurry.clear()
                try:
                    await asyncio.wait_for(self._hurry.wait(), delay)
                except TimeoutError:
                    pass
            try:
                await self._list()
            except Exception as exc:  # noqa: BLE001 - every failure is retried; `sync` reports it
                self._listed(exc)
                delay = self._backoff.next()
                log.warning("informer_list_failed", what=self._what, error=str(exc), retry_in=round(delay, 2))
                continue
            self._listed(None)
            delay = await self._watch()

    def _listed(self, error: Exception | None) -> None:
        listing = self._listing
        if listing is not None and not listing.done():
            if error is None:
                listing.set_result(None)
            else:
                listing.set_exception(error)
                # Nobody may be waiting for it: do not let asyncio call that an unread exception.
                listing.exception()

    async def _list(self) -> None:
        """All pages from one snapshot, then the store and the position replaced at once."""
        self.lists += 1
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            first: str | None = None
            try:
                while True:
                    page = await self._source.list(token)
                    first = first or page.resource_version
                    items.extend(page.items)
                    token = page.continue_token
                    if not token:
                        break
            except Expired:
                if token is None:
                    raise
                # The snapshot behind the continue token is gone: start over.
                continue
            break
        before, self._store = self._store, {_key(obj): obj for obj in items}
        self._position = first
        self._synced = True
        log.debug("informer_listed", what=self._what, objects=len(items), resource_version=first)
        self._notify_all()
        if self._on_change is not None:
            for key, obj in self._store.items():
                if key not in before or _rv(before[key]) != _rv(obj):
                    self._on_change(key, obj)
            for key in before.keys() - self._store.keys():
                self._on_change(key, None)

    async def _watch(self) -> float:
        """Watch from the position until the watch must list again; returns how long to wait first.
        One backoff serves lists and watches, and only a watch that works resets it: a watch that
        fails at once after every good list must not make a loop of lists."""
        loop = asyncio.get_running_loop()
        listed_at, since_list = loop.time(), 0
        while True:
            self.watches += 1
            started, events = loop.time(), 0
            try:
                async for event in self._source.watch(self._position or ""):
                    events += 1
                    since_list += 1
                    self._apply(event)
                    self._backoff.reset()
            except Expired:
                # At once, unless the list just made is already too old (a server that keeps no
                # history to speak of): then the backoff, or this becomes a loop of lists.
                fresh = since_list == 0 and loop.time() - listed_at < 1.0
                delay = self._backoff.next() if fresh else 0.0
                log.info("informer_expired", what=self._what, resource_version=self._position, retry_in=round(delay, 2))
                return delay
            except Disconnected as exc:
                delay = self._backoff.next()
                log.warning("informer_disconnected", what=self._what, error=str(exc), retry_in=round(delay, 2))
                await asyncio.sleep(delay)
                continue
            except Exception as exc:  # noqa: BLE001 - listing again is the way back
                delay = self._backoff.next()
                log.warning("informer_watch_failed", what=self._what, error=str(exc), retry_in=round(delay, 2))
                return delay
            # The server ended the watch (its timeoutSeconds): open it again from where the store is;
            # at once, unless it ended at once and empty (something in between cuts it short).
            if events == 0 and loop.time() - started < 1.0:
                await asyncio.sleep(self._backoff.next())

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = _rv(obj)
        if kind == "BOOKMARK":
            if rv:
                self._position = rv
                self._notify_all()
            return
        key = _key(obj)
        current = self._store.get(key)
        changed: dict[str, Any] | None | bool = False  # the object's new state, or False: none
        if kind in ("ADDED", "MODIFIED"):
            if current is None or not newer(_rv(current), rv):
                self._store[key] = changed = obj
        elif kind == "DELETED":
            if current is not None and not newer(_rv(current), rv):
                del self._store[key]
                changed = None
        else:
            return
        if rv:
            self._position = rv
        self._notify(key)
        if changed is not False and self._on_change is not None:
            self._on_change(key, changed)
