"""`python -m admitflow.cli`: the console script."""

from admitflow.cli import entrypoint

entrypoint()
