"""The port the tests give a server they start (`tests.conftest.free_port`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from admitflow.devserver import port_free
from tests.conftest import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not RANGE.exists(), reason="no /proc/sys/net/ipv4/ip_local_port_range here")
def test_a_server_port_is_never_one_an_outgoing_connection_can_take_first() -> None:
    # Seen once in CI: the time-skipping server "did not start within 5s" because its port, from the
    # ephemeral range, was taken by a client connection's local port before the server bound it.
    low, high = map(int, RANGE.read_text().split())
    for _ in range(50):
        port = free_port()
        assert not low <= port <= high, f"{port} is in the ephemeral range {low}-{high}"
        # And it is free, for a server: one binds with SO_REUSEADDR (Temporal's do), so a port whose
        # last connection waits in TIME_WAIT is free; a plain bind refuses it (seen failing here once).
        assert port_free("0.0.0.0", port)
