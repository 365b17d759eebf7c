"""The deployment's tests share one Temporal server, from tests/temporal_server.py."""

from tests.temporal_server import temporal_server  # noqa: F401  (the session fixture)
