"""The optional supervised warm start before RL, on the task's demonstrations."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

from kitchen.context import Context
from kitchen.errors import ConfigError
from kitchen.hooks import report_progress
from kitchen.requests import train_in_chunks
from kitchen.settings import ADAM_KEYS
from kitchen.stage import Stage
from kitchen.stages.training import adam_params
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask
from train_core.supervised import datum_from_tokens_weights, mean_nll
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput


def demonstration_data(task: RLTask, renderer: Renderer, rng: random.Random, count: int) -> list[Datum]:
    """`count` demonstrations as supervised datums, trained on the task's chosen messages."""
    if task.demonstrations is None:
        raise ConfigError("warm_start_steps > 0, but this recipe's task provides no demonstrations")
    data = []
    for messages in task.demonstrations(rng, count):
        tokens, weights = renderer.build_supervised_example(messages, task.demonstration_weights)
        data.append(datum_from_tokens_weights(tokens.to_ints(), list(weights)))
    return data


def batch_nll(batch: Sequence[Datum], fb: ForwardBackwardOutput) -> float:
    """The mean NLL of a cross-entropy step's batch, from its forward_backward output."""
    return mean_nll(
        [out["logprobs"].to_torch() for out in fb.loss_fn_outputs],
        [datum.loss_fn_inputs["weights"].to_torch() for datum in batch],
    )


def step_progress(
    ctx: Context, phase: str, batches: Sequence[Sequence[Datum]]
) -> Callable[[int, tuple[ForwardBackwardOutput, OptimStepOutput]], None]:
    """A `train_in_chunks` callback that reports each finished step (and its NLL) to the run's
    progress display: a warm start of hundreds of steps is otherwise silent."""

    def report(index: int, result: tuple[ForwardBackwardOutput, OptimStepOutput]) -> None:
        report_progress(ctx, phase, index + 1, len(batches), {"nll": batch_nll(batches[index], result[0])})

    return report


class WarmStart(Stage):
    """A short supervised phase on the task's demonstrations before RL, in the same run.

    A random-init model rarely samples a correct answer, so RL would have no signal; a few
    cross-entropy steps teach the answer format and a first guess at the skill. Runs only on a
    fresh start (a resumed run already holds trained weights), as pipelined optimizer steps with
    a constant `warm_start_learning_rate`. The warm-started state is saved as `warm_start` and
    reloaded without its optimizer: Adam's moment estimates from cross-entropy gradients would
    mis-scale the first RL updates, so RL starts with a fresh optimizer.
    """

    reads = ("rl_task", "renderer", "training_client")
    calls = (
        "TrainingClient.forward_backward",
        "TrainingClient.optim_step",
        "TrainingClient.save_state",
        "TrainingClient.load_state",
    )
    config_keys = (*ADAM_KEYS, "seed", "warm_start_steps", "warm_start_batch_size", "warm_start_learning_rate")

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        rng = random.Random(f"warm_start/{config.seed}")
        batches = [
            demonstration_data(ctx["rl_task"], ctx["renderer"], rng, config.warm_start_batch_size)
            for _ in range(config.warm_start_steps)
        ]
        adam = dataclasses.replace(adam_params(ctx), learning_rate=config.warm_start_learning_rate)
        client = ctx["training_client"]
        progress = step_progress(ctx, "warm_start", batches)
        results = await train_in_chunks(client, batches, "cross_entropy", None, adam, on_result=progress)
        path = await (await client.save_state("warm_start"))
        await (await client.load_state(path, with_optimizer=False))
        nll_by_step = [batch_nll(batch, fb) for batch, (fb, _) in zip(batches, results, strict=True)]
        ctx.record({"warm_start/nll_first": nll_by_step[0], "warm_start/nll_last": nll_by_step[-1]})
        ctx.log.info("warm_start.done", steps=len(batches), nll_last=nll_by_step[-1], state_path=path)
