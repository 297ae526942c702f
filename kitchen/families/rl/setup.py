"""Before the RL steps: the recipe's task (envs, held-out set, demonstrations), the other models
its envs sample from, and the optional supervised warm start on its demonstrations."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.hooks import report_progress
from kitchen.engine.ports import ServiceBackend, Tokenizer, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import OptimizerSettings, OtherModel
from kitchen.families.common.setup import TrainingClientOut, message_roles, open_other_model, same_tokenizer
from kitchen.families.common.training import adam_params, train_in_chunks
from kitchen.families.rl.settings import RLSettings, WarmStartSettings
from train_core.renderers.base import Renderer
from train_core.rl.task import DataCheck, RLTask, RLTaskFactory
from train_core.supervised import datum_from_tokens_weights, mean_nll
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput


@dataclass(frozen=True)
class Task:
    rl_task: RLTask
    num_steps: int


class BuildRLTask(Stage):
    """The recipe's envs, held-out set and demonstrations, built up front so bad data fails before
    any training; also fixes the number of RL steps (`rl.num_batches`). The recipe's factory gets
    the whole config (its `env` section among the rest)."""

    def __init__(self, factory: RLTaskFactory, check_data: DataCheck | None = None, name: str | None = None) -> None:
        super().__init__(name)
        self.factory = factory
        self.check_data = check_data

    def check_inputs(self, config: Any) -> None:
        if self.check_data is not None:
            self.check_data(config, message_roles(config))

    async def run(self, ctx: Context, renderer: Renderer, config: RLSettings) -> Task:
        task = self.factory(config, renderer)
        if len(task.train) == 0:
            raise DataError("the RL dataset has no batches")
        for warning in task.warnings:
            ctx.log.warning("rl_task.warning", message=warning)
        for note in task.notes:
            ctx.log.info("rl_task.note", message=note)
        ctx.log.info("rl_task.built", batches=len(task.train), eval_groups=len(task.eval_builders))
        return Task(task, config.rl.num_batches)


class OpenTaskModels(Stage):
    """Open the other models the task's envs sample from (`RLTask.models`: an opponent, an
    answerer, a grader) and bind each to its slot, before the first rollout. The envs render
    their prompts with the run's renderer, so a model named by another `model_name` must share
    the trained model's tokenizer (refused by the slot's role otherwise)."""

    calls = (ServiceBackend.create_sampling_client, ServiceBackend.get_tokenizer)

    async def run(
        self, ctx: Context, rl_task: RLTask, service: ServiceBackend, tokenizer: Tokenizer, run: RunConfig
    ) -> None:
        for slot in rl_task.models:
            other = slot.model_name
            if other and other != run.model_name and not same_tokenizer(tokenizer, service.get_tokenizer(other)):
                raise ConfigError(
                    f"the {slot.role} model {other!r} has a different tokenizer from model_name "
                    f"{run.model_name!r}; the environment renders its prompts with the run's renderer"
                )
            model = OtherModel(model_name=slot.model_name, checkpoint=slot.checkpoint)
            client, path = await open_other_model(service, model, run.model_name)
            slot.bind(client)
            ctx.log.info("model_client.ready", client=slot.role, path=path)


def demonstration_data(task: RLTask, renderer: Renderer, rng: random.Random, count: int) -> list[Datum]:
    """`count` demonstrations as supervised datums, trained on the task's chosen messages."""
    if task.demonstrations is None:
        raise ConfigError("warm_start.steps > 0, but this recipe's task provides no demonstrations")
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
    a constant `warm_start.learning_rate`. The warm-started state is saved as `warm_start`, and RL
    trains a new client made from it without its optimizer (Adam's moment estimates from
    cross-entropy gradients would mis-scale the first RL updates). A new client, not `load_state`
    on the live one: the Tinker service refuses that.
    """

    calls = (
        TrainingClient.forward_backward,
        TrainingClient.optim_step,
        TrainingClient.save_state,
        ServiceBackend.create_training_client_from_state,
    )

    async def run(
        self,
        ctx: Context,
        rl_task: RLTask,
        renderer: Renderer,
        training_client: TrainingClient,
        service: ServiceBackend,
        warm_start: WarmStartSettings,
        optimizer: OptimizerSettings,
        run: RunConfig,
    ) -> TrainingClientOut:
        rng = random.Random(f"warm_start/{run.seed}")
        batches = [demonstration_data(rl_task, renderer, rng, warm_start.batch_size) for _ in range(warm_start.steps)]
        adam = dataclasses.replace(adam_params(ctx, optimizer), learning_rate=warm_start.learning_rate)
        progress = step_progress(ctx, "warm_start", batches)
        results = await train_in_chunks(training_client, batches, "cross_entropy", None, adam, on_result=progress)
        path = await (await training_client.save_state("warm_start"))
        rl_client = await service.create_training_client_from_state(path, with_optimizer=False)
        nll_by_step = [batch_nll(batch, fb) for batch, (fb, _) in zip(batches, results, strict=True)]
        ctx.record({"warm_start/nll_first": nll_by_step[0], "warm_start/nll_last": nll_by_step[-1]})
        ctx.log.info("warm_start.done", steps=len(batches), nll_last=nll_by_step[-1], state_path=path)
        return TrainingClientOut(rl_client)
