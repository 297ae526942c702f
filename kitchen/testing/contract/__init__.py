"""kitchen's backend contract suite: what every backend (noop, local, distributed, tinker, a
third party's) must do the same way — forward passes and every built-in loss, ordering of
pipelined requests, optimizer steps, sampling with stops and seeds, logprobs that agree across
paths, checkpoints that reload.

A backend package runs it against its registered backend (its `kitchen.backends` entry point):

    pytest --pyargs kitchen.testing.contract --kitchen-backend=NAME

Each test takes the `backend` fixture (`kitchen.testing.plugin`): a fresh backend built by the
registered factory with base model "tiny" (the embedded tiny model), so a backend must accept
that name. kitchen's own suite runs the same tests over its built-in backends
(`tests/contract/`).
"""
