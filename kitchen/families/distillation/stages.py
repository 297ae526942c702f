"""Distillation stages: the teacher-KL advantage adjuster and its held-out twin (on-policy), the
teacher's answers as a data set plus the NLL floor it sets (prompt distillation), and a teacher's
reasoning traces as a data set (reasoning distillation)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.ports import SamplingClient, ServiceBackend
from kitchen.engine.runs.datasets import is_hub_name, load_located_records, prompt_messages
from kitchen.engine.stage import Persisted, Stage
from kitchen.families.common.requests import score_targets
from kitchen.families.common.settings import DataSettings, SamplingSettings
from kitchen.families.common.setup import message_roles, open_other_model
from kitchen.families.distillation.settings import (
    AnsweringTeacher,
    OnPolicyDistillationSettings,
    ReasoningDistillationSettings,
    TeacherSettings,
)
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.evaluation import roll_out_held_out
from kitchen.families.rl.settings import EpisodeSettings
from kitchen.families.rl.step import RLData
from kitchen.families.supervised.examples import text_field
from train_core.distillation import TeacherKL, incorporate_teacher_kl
from train_core.errors import InvalidInputError
from train_core.renderers.base import Message, Renderer
from train_core.renderers.messages import STANDARD_ROLES, check_messages
from train_core.rl.data_processing import assemble_training_data, compute_advantages
from train_core.rl.task import RLTask
from train_core.supervised import cut_messages, datum_from_tokens_weights, mean_nll
from train_core.types import Datum, SamplingParams


def load_prompts(path: str, roles: frozenset[str] = STANDARD_ROLES) -> list[list[Message]]:
    """The conversations of a prompt set (see `kitchen.engine.runs.datasets.prompt_messages`)."""
    return [prompt_messages(record, where, roles) for where, record in load_located_records(path)]


def teacher_conversations(path: str, roles: frozenset[str] = STANDARD_ROLES) -> list[list[Message]]:
    """The generated answers with the system prompt they were asked under: each record
    `{"messages": [...], "system": text}` as `[system message, *messages]`; a bad record is a
    DataError naming its file and line."""
    conversations = []
    for where, record in load_located_records(path, required_any=(("messages",), ("system",))):
        try:
            system: Message = {"role": "system", "content": text_field(record, "system")}
            conversations.append([system, *check_messages(record["messages"], roles)])
        except InvalidInputError as exc:
            raise DataError(f"{where}: {exc}") from None
    return conversations


def teacher_of_each(tags_D: Sequence[Sequence[str]], teachers: Mapping[str, SamplingClient]) -> list[SamplingClient]:
    """The teacher client for each datum: the one named by the datum's data-set tag."""
    picked = []
    for tags in tags_D:
        names = [tag for tag in tags if tag in teachers]
        if not names:
            raise DataError(f"no teacher for a group tagged {list(tags)}; teachers: {sorted(teachers)}")
        picked.append(teachers[names[0]])
    return picked


@dataclass(frozen=True)
class Teachers:
    teacher_clients: dict[str, SamplingClient]
    """Each data set's teacher, by data-set name."""
    teacher_client: SamplingClient
    """The first data set's teacher (its held-out reward and KL are evaluated)."""
    teacher_paths: Persisted[dict[str, str]]


class OpenTeachers(Stage):
    """A sampling client on each data set's teacher (`datasets[i].teacher`: a base model, or a
    checkpoint / run directory)."""

    calls = (ServiceBackend.create_sampling_client,)

    async def run(self, ctx: Context, service: ServiceBackend, config: OnPolicyDistillationSettings) -> Teachers:
        clients, paths = {}, {}
        for dataset in config.datasets:
            clients[dataset.name], paths[dataset.name] = await open_other_model(
                service, dataset.teacher, config.model_name
            )
            ctx.log.info("model_client.ready", client=f"teacher/{dataset.name}", path=paths[dataset.name])
        return Teachers(clients, clients[config.datasets[0].name], paths)


class ApplyTeacherKL(Stage):
    """An advantage adjuster: each datum's teacher (by its data set) scores the sampled tokens,
    and `algorithm.kl_penalty_coef` times the per-token reverse KL `lp_student - lp_teacher` is
    taken off the advantages (discounted by `algorithm.kl_discount_factor`). Logs `teacher_kl` (mean per action token)
    and `teacher_kl/<dataset>`."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(
        self,
        ctx: Context,
        rl_data: list[Datum],
        rl_data_tags: list[list[str]],
        teacher_clients: dict[str, SamplingClient],
        algorithm: AlgorithmSettings,
    ) -> RLData:
        if not rl_data:
            return RLData(rl_data)
        teacher_lp_D = await score_targets(teacher_of_each(rl_data_tags, teacher_clients), rl_data)
        new_data_D, kl = incorporate_teacher_kl(
            rl_data, teacher_lp_D, algorithm.kl_penalty_coef, algorithm.kl_discount_factor
        )
        ctx.record(teacher_kl_metrics(kl, rl_data_tags, teacher_clients))
        return RLData(new_data_D)


def teacher_kl_metrics(kl: TeacherKL, tags_D: Sequence[Sequence[str]], names: Iterable[str]) -> dict[str, float]:
    """`teacher_kl` over every action token, and `teacher_kl/<name>` over each data set's."""
    metrics = {"teacher_kl": kl.mean()}
    for name in names:
        indices = [i for i, tags in enumerate(tags_D) if name in tags]
        if indices:
            metrics[f"teacher_kl/{name}"] = kl.mean(indices)
    return metrics


class EvaluateTeacherKL(Stage):
    """The student's reverse KL to the (first data set's) teacher on the task's evaluation prompts,
    sampled with the current sampler: `eval/teacher_kl`, and `eval/teacher_kl/<tag>` per logging
    tag (e.g. the prompts it never trains on)."""

    calls = (SamplingClient.sample, SamplingClient.compute_logprobs)

    async def run(
        self,
        ctx: Context,
        rl_task: RLTask,
        sampling_client: SamplingClient,
        sampler_step: int,
        teacher_client: SamplingClient,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
    ) -> None:
        seed_key = ("eval_kl", run.seed, ctx.step)
        groups, _ = await roll_out_held_out(rl_task, sampling_client, sampler_step, sampling, episode, seed_key)
        if not groups:
            return
        trajectories_P = [g.trajectories for g in groups]
        data_D, metadata_D = assemble_training_data(trajectories_P, compute_advantages(trajectories_P))
        teacher_lp_D = await score_targets(teacher_client, data_D)
        _, kl = incorporate_teacher_kl(data_D, teacher_lp_D, coef=0.0)
        tags_D = [groups[meta["group_idx"]].builder.logging_tags() for meta in metadata_D]
        tags = sorted({tag for tags in tags_D for tag in tags})
        ctx.record({f"eval/{key}": value for key, value in teacher_kl_metrics(kl, tags_D, tags).items()})


@dataclass(frozen=True)
class TeacherAnswers:
    data_files: Persisted[dict[str, str]]


class GenerateTeacherAnswers(Stage):
    """The teacher's answers to the train (and held-out) prompts, asked under `teacher.system_prompt`,
    written as conversations without it to `RUN_DIR/distill/{train,eval}.jsonl` (each record
    keeps the system prompt under `system` for the teacher's NLL floor), as `data_files`.
    Requests go out together so a backend batches them. A finished generation (its `.done`
    marker) is reused on resume, and `teacher.generated_dataset` points at one from an earlier run instead."""

    calls = (SamplingClient.sample,)

    def check_inputs(self, config: Any) -> None:
        """The local prompt sets' records and roles, or those of the `generated_dataset`."""
        roles = message_roles(config)
        teacher, data = section_of(config, TeacherSettings), section_of(config, DataSettings)
        if teacher.generated_dataset:
            for split in ("train", "eval"):
                path = Path(teacher.generated_dataset) / f"{split}.jsonl"
                if split == "train" or path.exists():
                    teacher_conversations(str(path), roles)
            return
        for source in (data.dataset, data.eval_dataset):
            if source and not is_hub_name(source):
                load_prompts(source, roles)

    async def run(
        self,
        ctx: Context,
        renderer: Renderer,
        teacher_client: SamplingClient,
        teacher: TeacherSettings,
        data: DataSettings,
        run: RunConfig,
    ) -> TeacherAnswers:
        asked = Asked(teacher, teacher.system_prompt, keep_thinking=False)
        return TeacherAnswers(await teacher_data_files(ctx, renderer, teacher_client, asked, data, run.seed))


@dataclass(frozen=True)
class Asked:
    """How a teacher is asked: its settings, the system prompt it answers under (None: none), and
    whether its reasoning is kept in the written answers."""

    teacher: AnsweringTeacher
    system_prompt: str | None
    keep_thinking: bool


async def teacher_data_files(
    ctx: Context, renderer: Renderer, client: SamplingClient, asked: Asked, data: DataSettings, seed: int
) -> dict[str, str]:
    """The train (and eval) files of the teacher's answers: `teacher.generated_dataset`'s, or
    generated into `RUN_DIR/distill/` for the splits not already done there."""
    if asked.teacher.generated_dataset:
        folder = Path(asked.teacher.generated_dataset)
        if not (folder / "train.jsonl").is_file():
            raise ConfigError(f"teacher.generated_dataset {folder}: no train.jsonl there")
    else:
        if ctx.run_dir is None:
            raise ConfigError("distillation writes the teacher's answers to the run directory; none is set")
        folder = ctx.run_dir / "distill"
        for split, source in (("train", data.dataset), ("eval", data.eval_dataset)):
            if source and not (folder / f"{split}.done").exists():
                await generate_answers(
                    ctx, renderer, client, asked, data.max_length, seed, source, folder / f"{split}.jsonl"
                )
    return {
        split: str(folder / f"{split}.jsonl") for split in ("train", "eval") if (folder / f"{split}.jsonl").is_file()
    }


async def generate_answers(
    ctx: Context,
    renderer: Renderer,
    client: SamplingClient,
    asked: Asked,
    max_length: int | None,
    seed: int,
    source: str,
    out: Path,
) -> None:
    """The teacher's answers to `source`'s prompts as JSONL at `out`, then its `.done` marker;
    each record keeps the system prompt it was asked under as `system`."""
    split, teacher = out.stem, asked.teacher
    prompts = [cut_messages(prompt, max_length) for prompt in load_prompts(source, renderer.roles)]
    system: list[Message] = (
        [{"role": "system", "content": asked.system_prompt}] if asked.system_prompt is not None else []
    )
    params = [
        SamplingParams(
            max_tokens=teacher.max_tokens,
            temperature=teacher.temperature,
            seed=hash((seed, split, index)) & 0x7FFFFFFF,
            stop=renderer.get_stop_sequences(),
        )
        for index in range(len(prompts))
    ]
    results = await asyncio.gather(
        *(
            client.sample(renderer.build_generation_prompt([*system, *prompt]), 1, p)
            for prompt, p in zip(prompts, params, strict=True)
        )
    )
    lines = []
    for prompt, result in zip(prompts, results, strict=True):
        reply, _ = renderer.parse_response(result.sequences[0].tokens)
        answer: Message = {"role": "assistant", "content": reply["content"]}
        if asked.keep_thinking and reply.get("thinking"):
            answer["thinking"] = reply["thinking"]
        record: dict[str, Any] = {"messages": [*prompt, answer]}
        if asked.system_prompt is not None:
            record["system"] = asked.system_prompt
        lines.append(json.dumps(record))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out.with_suffix(".done").touch()
    ctx.log.info("distill.generated", split=split, records=len(lines), path=str(out))


class GenerateTraces(Stage):
    """Reasoning distillation's traces: `teacher`'s replies to the train (and held-out) prompts,
    reasoning kept under `thinking`, written to `RUN_DIR/distill/{train,eval}.jsonl` as
    `data_files` (reused on resume; `teacher.generated_dataset` reuses an earlier run's)."""

    calls = (SamplingClient.sample,)

    def check_inputs(self, config: Any) -> None:
        """The local prompt sets' records and roles, or the `generated_dataset`'s conversations."""
        teacher = config.teacher
        roles = message_roles(config)
        if teacher is not None and teacher.generated_dataset:
            for split in ("train", "eval"):
                path = Path(teacher.generated_dataset) / f"{split}.jsonl"
                if split == "train" or path.exists():
                    for where, record in load_located_records(str(path), required_any=(("messages",),)):
                        try:
                            check_messages(record["messages"], roles)
                        except InvalidInputError as exc:
                            raise DataError(f"{where}: {exc}") from None
            return
        data = section_of(config, DataSettings)
        for source in (data.dataset, data.eval_dataset):
            if source and not is_hub_name(source):
                load_prompts(source, roles)

    async def run(
        self,
        ctx: Context,
        renderer: Renderer,
        teacher_client: SamplingClient,
        config: ReasoningDistillationSettings,
        data: DataSettings,
        run: RunConfig,
    ) -> TeacherAnswers:
        assert config.teacher is not None  # the workflow adds this stage only with a teacher
        asked = Asked(config.teacher, None, keep_thinking=True)
        return TeacherAnswers(await teacher_data_files(ctx, renderer, teacher_client, asked, data, run.seed))


class EvaluateTeacherFloor(Stage):
    """The teacher's own NLL of its held-out answers, with the system prompt: the floor the
    student's `eval/nll` (without it) is measured against, `eval/teacher_nll`."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(
        self, ctx: Context, data_files: dict[str, str], renderer: Renderer, teacher_client: SamplingClient
    ) -> None:
        path = data_files.get("eval")
        if path is None:
            return
        data_D = []
        for conversation in teacher_conversations(path, renderer.roles):
            tokens, weights = renderer.build_supervised_example(conversation)
            data_D.append(datum_from_tokens_weights(tokens.to_ints(), [float(w) for w in weights]))
        logprobs_D = await score_targets(teacher_client, data_D)
        weights_D = [d.loss_fn_inputs["weights"].to_torch() for d in data_D]
        ctx.record({"eval/teacher_nll": mean_nll(logprobs_D, weights_D)})
