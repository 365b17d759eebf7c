"""The worker skips the sandbox's serialization-context question only for a converter that no
context changes (worker/context_free.py): admitflow's own, with or without encryption; a converter
with a context-aware codec keeps the question."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.worker import UnsandboxedWorkflowRunner

from admitflow.codec import DATA_CONVERTER, data_converter, for_workers
from admitflow.worker.context_free import ContextFreeRunner, context_free
from admitflow.worker.main import replayer, without_context


class KeyPerWorkflow(PayloadCodec, WithSerializationContext):
    """A codec that a context changes (as one keyed per workflow would be)."""

    def __init__(self, workflow_id: str = "") -> None:
        self.workflow_id = workflow_id

    def with_context(self, context: SerializationContext) -> "KeyPerWorkflow":
        return KeyPerWorkflow(getattr(context, "workflow_id", ""))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def test_admitflows_converters_take_no_context():
    key = base64.b64encode(b"k" * 32).decode()
    encrypted = data_converter({"ADMITFLOW_ENCRYPTION_KEY": key, "ADMITFLOW_ENCRYPTION_KEY_ID": "k1"})
    for converter in (DATA_CONVERTER, for_workers(DATA_CONVERTER), encrypted, for_workers(encrypted)):
        assert context_free(converter)


def test_a_context_aware_codec_keeps_the_question():
    keyed = dataclasses.replace(DATA_CONVERTER, payload_codec=KeyPerWorkflow())
    assert not context_free(keyed)
    runner = UnsandboxedWorkflowRunner()
    assert without_context(runner, keyed) is runner
    assert isinstance(without_context(runner, DATA_CONVERTER), ContextFreeRunner)


def test_the_replayer_skips_it_too():
    assert isinstance(replayer().config()["workflow_runner"], ContextFreeRunner)
