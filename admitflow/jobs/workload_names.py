"""The name Kueue gives the Workload of a job (pkg/controller/jobframework/workload_names.go,
GetWorkloadNameForOwnerWithGVK).

`<lowercase kind>-<job name>`, cut to 247 bytes (57 with Kueue's ShortWorkloadNames gate, alpha and
off), then `-` and the first 5 hex digits of the SHA-1 of `Kind\\nGroup\\nname\\nuid`. The cut does
not care about separators (the prefix may end in `-`), and the hash is of the whole name, so two
long names with the same prefix still differ. The version is not hashed: the name depends only on
the job's kind, group, name and UID, so a Workload deleted and made again for the same job gets the
same name.
"""

from __future__ import annotations

import hashlib

HASH_LENGTH = 5
MAX_WORKLOAD_NAME_LENGTH = 253
SHORT_MAX_WORKLOAD_NAME_LENGTH = 63


def max_prefix_length(short: bool = False) -> int:
    """The longest prefix: the name's limit less the separator and the hash."""
    return (SHORT_MAX_WORKLOAD_NAME_LENGTH if short else MAX_WORKLOAD_NAME_LENGTH) - 1 - HASH_LENGTH


def workload_name_prefix(owner_name: str, kind: str, short: bool = False) -> str:
    """Kueue's GenerateWorkloadNamePrefix: `<kind>-<name>` in lower case, its first bytes kept."""
    return _truncate(f"{kind.lower()}-{owner_name}", max_prefix_length(short))


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str, extra: str = "", short: bool = False) -> str:
    """GetWorkloadNameForOwnerWithGVK (`extra` empty) and GenerateWorkloadNameWithExtra: the
    Workload name of the owner `kind` (of API `group`) named `owner_name` with `owner_uid`.
    `short` is Kueue's ShortWorkloadNames gate (63 characters instead of 253)."""
    return f"{workload_name_prefix(owner_name, kind, short)}-{_hash(owner_name, owner_uid, kind, group, extra)[:HASH_LENGTH]}"


def _hash(owner_name: str, owner_uid: str, kind: str, group: str, extra: str) -> str:
    parts = [kind, group, owner_name, owner_uid] + ([extra] if extra else [])
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()  # noqa: S324 - Kueue's naming hash, not security


def _truncate(value: str, length: int) -> str:
    # Go slices strings by bytes; names are ASCII, but cut the same way whatever they hold.
    encoded = value.encode()
    return encoded[:length].decode(errors="ignore") if len(encoded) > length else value
