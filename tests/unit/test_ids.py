"""Workflow IDs and names cut with a hash: Temporal's 255 for workflow IDs (unchanged, histories hold
them), Kueue's limitObjectName for ProvisioningRequests and their PodTemplates."""

from __future__ import annotations

import hashlib

import pytest

from admitflow import ids
from admitflow.admission import provisioning as prov


def sha1(text: str, n: int) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:n]


@pytest.mark.parametrize(
    ("full", "expected"),
    [
        pytest.param("w" * 255, "w" * 255, id="a-workflow-id-of-255-characters-is-kept"),
        pytest.param("w" * 256, "w" * 244 + "-" + sha1("w" * 256, 10), id="a-longer-workflow-id-keeps-244-then-a-dash-and-ten-hex-of-sha1"),
        pytest.param("x" * 400, "x" * 244 + "-" + sha1("x" * 400, 10), id="a-much-longer-workflow-id-is-cut-to-255-too"),
    ],
)
def test_limit_id_is_unchanged(full, expected):
    assert ids.limit_id(full) == expected
    assert len(ids.limit_id(full)) <= ids.MAX_ID_LENGTH


@pytest.mark.parametrize(
    ("length", "kept"),
    [
        pytest.param(10, True, id="a-short-name-is-kept"),
        pytest.param(247, True, id="a-name-of-247-characters-is-kept"),
        pytest.param(248, False, id="a-name-of-248-characters-is-cut-although-it-would-fit"),
        pytest.param(253, False, id="a-name-of-253-characters-is-cut-although-it-would-fit"),
        pytest.param(300, False, id="a-name-too-long-for-kubernetes-is-cut"),
    ],
)
def test_limit_object_name_is_kueues(length, kept):
    full = ("a-" * length)[:length]
    name = prov.limit_object_name(full)
    if kept:
        assert name == full
    else:
        assert name == full[:247] + "-" + sha1(full, 5)
        assert len(name) == 253
