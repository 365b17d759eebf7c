"""Simulated parts of a cluster: what admitflow runs in place of real infrastructure so that people
and tests can drive every path (docs/simulated-autoscaler.md). Pure and deterministic, like
admitflow.admission; the workflows that hold them are in workflows/."""
