"""A read whose workflow does not answer in time says so in one line with the same words, whichever
deadline came first: the client's ("Timeout expired") or the server's ("query timed out before a
worker could process it"), and the CLI adds what to look at. Which one comes first is a race: CI
once saw the server's, which named "worker" and so lost the hint."""

from __future__ import annotations

import argparse

import pytest
from temporalio.service import RPCError, RPCStatusCode

from admitflow.cli import errors
from admitflow.client.connection import _unanswered_query

HINT = '; is a worker polling task queue "admitflow"? (admitflow worker); or allow more with --request-timeout'


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (RPCStatusCode.DEADLINE_EXCEEDED, "Timeout expired"),
        (RPCStatusCode.DEADLINE_EXCEEDED, "query timed out before a worker could process it"),
        (RPCStatusCode.CANCELLED, "Timeout expired"),
    ],
)
def test_a_query_that_timed_out_reads_the_same_whoever_gave_up(status, message):
    err = _unanswered_query(RPCError(message, status, b""), "the catalog (admitflow/catalog)")
    line, code = errors.explain(err, argparse.Namespace(task_queue=None))
    assert (line, code) == ("the catalog (admitflow/catalog) does not answer: the query timed out" + HINT, 1)


def test_a_workflow_whose_task_fails_keeps_the_servers_words():
    err = _unanswered_query(RPCError("workflow task failed", RPCStatusCode.FAILED_PRECONDITION, b""), 'clusterqueues "cq"')
    assert str(err) == 'clusterqueues "cq" does not answer: workflow task failed'
