"""The pending workloads of a ClusterQueue, in Kueue's order, with lookups by key.

A ClusterQueue may hold 10,000 pending workloads and take hundreds of messages per workflow task, so
inserting, finding and removing an entry must not walk the whole queue. The queue keeps a sorted
list (binary search on the order key) and an index by key, and serializes as a plain list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from datetime import datetime
from functools import cached_property
from typing import Any

from pydantic import Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from admitflow.admission.requests import PodSetRequest
from admitflow.wire import WireModel

OrderKey = tuple[int, datetime, str]


class QueueEntry(WireModel):
    """A pending workload, as compact as the scheduler allows."""

    key: str = Field(description="namespace/name")
    uid: str
    ticket: int = Field(description="The workload's enqueue counter; a message for another ticket is stale.")
    local_queue: str
    priority: int = 0
    timestamp: datetime = Field(description="Queue order timestamp: creation, or eviction time.")
    pod_sets: list[PodSetRequest]
    inadmissible: bool = Field(
        default=False, description="Set aside until quota is freed or the queue changes (BestEffortFIFO)."
    )
    notice: tuple[str, str] | None = Field(default=None, description="Last pending reason and message sent.")
    retell: bool = Field(
        default=False, description="The queue's configuration changed since that notice: a changed message is told."
    )
    evaluated: tuple[str, str] | None = Field(
        default=None, description="Reason and message of the last evaluation, told or not."
    )
    answer_unread: bool | None = Field(
        default=None,
        description="True: its enqueue asked for its answer in an update that its sender stopped waiting for (and sent "
        "again as a signal): what the queue decides for this ticket is told by signal, never only in that answer. "
        "None otherwise (left out of the wire: a deep queue carries thousands of entries).",
    )

    # Cached on the instance (its __dict__, outside the fields: not serialized, not compared). These
    # are read for every entry in every scheduling pass; a pydantic private attribute took about
    # 2 µs a read.
    @cached_property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @cached_property
    def local_queue_key(self) -> str:
        return f"{self.namespace}/{self.local_queue}"

    def order(self) -> OrderKey:
        # Kueue's heap: higher priority first, then earlier timestamp, then uid.
        return (-self.priority, self.timestamp, self.uid)

    @cached_property
    def shape(self) -> tuple:
        """What quota and flavor matching look at. Workloads of one shape fit or fail alike, which
        is Kueue's scheduling equivalence."""
        return tuple(
            (
                ps.name,
                ps.count,
                tuple(sorted(ps.per_pod.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.affinity_terms,
                ps.tolerations,
            )
            for ps in self.pod_sets
        )


class PendingQueue:
    """Sorted pending entries with an index by key; one entry per key."""

    def __init__(self, entries: list[QueueEntry] | None = None) -> None:
        self._entries: list[QueueEntry] = sorted(entries or [], key=QueueEntry.order)
        self._orders: list[OrderKey] = [e.order() for e in self._entries]
        self._by_key: dict[str, QueueEntry] = {e.key: e for e in self._entries}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[QueueEntry]:
        return iter(list(self._entries))

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PendingQueue) and self._entries == other._entries

    def get(self, key: str) -> QueueEntry | None:
        return self._by_key.get(key)

    def add(self, entry: QueueEntry) -> None:
        self.remove(entry.key)
        order = entry.order()
        i = bisect.bisect_right(self._orders, order)
        self._entries.insert(i, entry)
        self._orders.insert(i, order)
        self._by_key[entry.key] = entry

    def remove(self, key: str) -> QueueEntry | None:
        entry = self._by_key.pop(key, None)
        if entry is None:
            return None
        i = bisect.bisect_left(self._orders, entry.order())
        while self._entries[i] is not entry:
            i += 1
        del self._entries[i]
        del self._orders[i]
        return entry

    def entries(self) -> list[QueueEntry]:
        return list(self._entries)

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        as_list = handler.generate_schema(list[QueueEntry])
        return core_schema.no_info_after_validator_function(
            lambda entries: entries if isinstance(entries, PendingQueue) else cls(entries),
            core_schema.union_schema([core_schema.is_instance_schema(cls), as_list]),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda q: q.entries(), return_schema=as_list
            ),
        )
