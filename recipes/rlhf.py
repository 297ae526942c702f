"""rlhf: RL from pairwise preferences, in three phases that also run alone (`phase=...`).

1. `sft`: supervised fine-tuning on the comparison file's completions (by default chosen and
   rejected alike: a policy that writes both kinds of reply, for RL to improve on).
2. `preference_model`: supervised training, from the SFT weights, of a pairwise judge on the
   comparisons shown in both orderings (`train_core.preference.comparison_prompt`), with its
   held-out accuracy and position bias.
3. `rl`: from the SFT weights, RL where each prompt's group of samples is rewarded by a
   tournament judged by the preference model (or a rule judge: `reward_judge`); the win rate of
   the trained policy against the SFT policy, by `win_rate_judge`, is measured on held-out
   prompts in both orderings.

Each phase is an ordinary run in its own subdirectory (`RUN_DIR/sft`, `RUN_DIR/preference_model`,
`RUN_DIR/rl`), with its own config.yaml, metrics.jsonl and checkpoints.jsonl. That is what makes
resume simple and exact: rerunning the command skips the phases whose directory holds a final
checkpoint and resumes the unfinished one from its own last checkpoint, with the loop positions,
step counter and LR schedule of a single-phase run (three step loops in one workflow would share
one step counter and checkpoint log, and a resume would have to skip the finished loops' setup).
Phases 2 and 3 start from `sft_checkpoint` (default `RUN_DIR/sft`), and phase 3 judges with
`preference_model_checkpoint` (default `RUN_DIR/preference_model`); either may be a run
directory or a checkpoint path.

Per-phase keys go in the `sft`, `preference_model` and `rl` sections (e.g. `rl.num_batches=10`);
shared keys (model, backend, seed, renderer, data) are set once at the top.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kitchen.engine.backends import backend_specs
from kitchen.engine.config.loading import Count, defaults
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError
from kitchen.engine.hooks import ProgressHook
from kitchen.engine.launch import run_recipe_async
from kitchen.engine.ports import ServiceBackend
from kitchen.engine.recipe import Recipe
from kitchen.engine.runs.checkpoints import CheckpointRecord, append_record, finished, read_records, resolve_state_path
from kitchen.engine.stage import Stage
from kitchen.engine.subruns import PhaseBackend
from kitchen.engine.validation import validate_recipe
from kitchen.engine.workflow import Node, Workflow
from kitchen.families.common.completers import AsyncJudge
from kitchen.families.common.settings import OtherModel, RendererSettings
from kitchen.families.common.setup import CloseBackend, CreateReferenceClient, OpenOtherModel
from kitchen.families.preference.reward_model import (
    EvaluatePreferenceModel,
    OpenModelJudge,
    ProvideJudge,
    WriteComparisonConversations,
    check_comparison_files,
    read_comparisons,
)
from kitchen.families.preference.settings import ComparisonSettings, JudgeEvalSettings, WinRateSettings
from kitchen.families.preference.stages import EvaluateWinRate
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.step import ApplyKLPenalty
from kitchen.families.rl.workflow import rl_workflow
from kitchen.families.supervised.examples import Conversation
from kitchen.families.supervised.settings import ChatSupervisedSettings
from kitchen.families.supervised.workflow import supervised_workflow
from recipes.data import shipped_data
from recipes.judges import check_judge_name, get_judge
from train_core.renderers.base import Message, Renderer
from train_core.rl.pairwise_preference import JudgeSlot, PairwisePreferenceDataset
from train_core.rl.task import RLTask
from train_core.rl.tournament import PairScheme

Phase = Literal["sft", "preference_model", "rl"]
PHASES: tuple[Phase, ...] = ("sft", "preference_model", "rl")
PREFERENCE_MODEL = "preference_model"
"""`reward_judge` / `win_rate_judge` value naming the learned judge of phase 2."""

TRAIN = shipped_data("preference/polite_arithmetic_train.jsonl")
TEST = shipped_data("preference/polite_arithmetic_test.jsonl")


def _judge_name(name: str | None, learned_ok: bool) -> str | None:
    if name is None or (learned_ok and name == PREFERENCE_MODEL):
        return name
    return check_judge_name(name)


# -- the phases' settings --------------------------------------------------------------------


@defaults(
    dataset=TRAIN,
    eval_dataset=TEST,
    renderer="role_colon",
    batch_size=32,
    num_epochs=8,
    learning_rate=3e-3,
    max_length=64,
    save_every=20,
    eval_every=0,
)
class SFTPhase(ChatSupervisedSettings, ComparisonSettings):
    examples: Literal["chosen", "both"] = Field(
        "both", description="train on the chosen completions, or on chosen and rejected alike"
    )


@defaults(
    dataset=TRAIN,
    eval_dataset=TEST,
    renderer="role_colon",
    batch_size=32,
    num_epochs=2,
    learning_rate=2e-3,
    max_length=128,
    save_every=20,
    eval_every=20,
)
class PreferenceModelPhase(ChatSupervisedSettings, ComparisonSettings, JudgeEvalSettings):
    """Phase 2: a pairwise preference model, trained as chat examples answered A or B."""


@defaults(
    renderer="role_colon",
    learning_rate=2e-4,
    group_size=4,
    groups_per_batch=16,
    num_batches=25,
    max_tokens=24,
    eval_every=5,
    save_every=10,
    pair_scheme="both_ways",
    win_rate_prompts=100,
    win_rate_max_tokens=24,
)
class RLPhase(RLSettings, ComparisonSettings, WinRateSettings):
    dataset: str = Field(TRAIN, description="comparison file whose prompts RL samples for")
    eval_dataset: str | None = Field(TEST, description="comparison file whose prompts the win rate uses")
    pair_scheme: PairScheme = Field(
        "one_way", description="tournament: all pairs one_way, or both_ways (cancels a judge's position bias)"
    )
    reward_judge: str = Field(PREFERENCE_MODEL, description="preference_model (judge_model), or a rule judge")
    judge_model: OtherModel = Field(default_factory=OtherModel, description="the learned judge's checkpoint")
    judge_max_concurrent: Count = Field(64, description="judge calls in flight at once")
    win_rate_judge: str | None = Field("polite_arithmetic", description="judge of policy vs SFT win rate")

    @field_validator("reward_judge")
    @classmethod
    def _reward_judge(cls, name: str) -> str:
        return str(_judge_name(name, learned_ok=True))

    @field_validator("win_rate_judge")
    @classmethod
    def _win_rate_judge(cls, name: str | None) -> str | None:
        return _judge_name(name, learned_ok=True)


# -- the phases' workflows ---------------------------------------------------------------------


def sft_workflow(config: SFTPhase) -> Workflow:
    return supervised_workflow(
        Conversation(),
        needs_renderer=True,
        name="rlhf_sft",
        prepare_data=[WriteComparisonConversations(config.examples)],
    )


def preference_model_workflow(config: PreferenceModelPhase) -> Workflow:
    return supervised_workflow(
        Conversation(),
        needs_renderer=True,
        name="rlhf_preference_model",
        prepare_data=[WriteComparisonConversations("preference_model")],
        evaluators=[EvaluatePreferenceModel()],
    )


def rl_task(config: RLPhase, renderer: Renderer) -> RLTask:
    prompts = [
        labeled.comparison.prompt_conversation for labeled in read_comparisons(config.dataset, config.dataset_layout)
    ]
    dataset = PairwisePreferenceDataset(
        prompts,
        renderer,
        JudgeSlot(max_concurrent=config.judge_max_concurrent),
        config.groups_per_batch,
        config.group_size,
        config.seed,
        config.pair_scheme,
    )
    return RLTask(train=dataset)


class BindJudge(Stage):
    """Give the task's tournament envs the judge opened for this run."""

    async def run(self, rl_task: RLTask, judge: AsyncJudge) -> None:
        dataset = rl_task.train
        assert isinstance(dataset, PairwisePreferenceDataset)
        dataset.judge.bind(judge)


@dataclass(frozen=True)
class EvalPrompts:
    eval_prompts: list[list[Message]]


class LoadEvalPrompts(Stage):
    """The held-out comparison file's prompts, for the win-rate evaluator."""

    async def run(self, config: RLPhase) -> EvalPrompts:
        path = config.eval_dataset
        comparisons = read_comparisons(path, config.dataset_layout) if path else []
        return EvalPrompts([labeled.comparison.prompt_conversation for labeled in comparisons])


def _judge_stages(name: str, key: str, client_key: str, model_key: str) -> list[Node]:
    if name == PREFERENCE_MODEL:
        return [
            OpenOtherModel(model_key, client_key, f"{client_key}_path", name=f"open_{client_key}"),
            OpenModelJudge(f"open_{key}", keys={"judge_client": client_key, "judge": key}),
        ]
    return [ProvideJudge(get_judge(name), f"provide_{key}", judge_key=key)]


def rl_phase_workflow(config: RLPhase) -> Workflow:
    """RL with tournament rewards; the frozen reference is the policy RL starts from (the SFT
    policy): the KL penalty's anchor and the win rate's opponent."""
    setup: list[Node] = [
        CreateReferenceClient(),
        *_judge_stages(config.reward_judge, "judge", "judge_client", "judge_model"),
        BindJudge(),
        LoadEvalPrompts(),
    ]
    evaluators: list[Node] = []
    after: list[Node] = []
    if config.win_rate_judge is not None:
        if config.win_rate_judge == PREFERENCE_MODEL:
            if config.reward_judge != PREFERENCE_MODEL:
                raise ConfigError(
                    "win_rate_judge=preference_model needs reward_judge=preference_model (one judge_model)"
                )
            judge_key = "judge"
        else:
            judge_key = "win_rate_judge"
            setup.append(ProvideJudge(get_judge(config.win_rate_judge), "provide_win_rate_judge", judge_key=judge_key))
        evaluators = [EvaluateWinRate(judge_key=judge_key)]
        after = [EvaluateWinRate("final_win_rate", judge_key=judge_key)]
    adjust: list[Node] = [ApplyKLPenalty()] if config.kl_penalty_coef > 0 else []
    return rl_workflow(
        rl_task,
        config.mode,
        setup=setup,
        adjust=adjust,
        evaluators=evaluators,
        after_training=after,
        check_data=lambda phase, roles: check_comparison_files(phase),
    )


PHASE_RECIPES: dict[Phase, Recipe] = {
    "sft": Recipe("rlhf_sft", "rlhf phase 1: SFT on the comparisons' completions", SFTPhase, sft_workflow),
    "preference_model": Recipe(
        "rlhf_preference_model",
        "rlhf phase 2: a pairwise preference model",
        PreferenceModelPhase,
        preference_model_workflow,
    ),
    "rl": Recipe("rlhf_rl", "rlhf phase 3: RL from pairwise preferences", RLPhase, rl_phase_workflow),
}


# -- the recipe --------------------------------------------------------------------------------

SHARED_KEYS = (
    "model_name", "backend", "seed", "lora_rank", "resume", "renderer",
    "dataset", "eval_dataset", "dataset_layout", "allow_tie", "reward_judge", "win_rate_judge",
)  # fmt: skip


class Config(RendererSettings, ComparisonSettings):
    phase: Literal["sft", "preference_model", "rl", "all"] = Field("all", description="run one phase, or all three")
    renderer: str | None = Field("role_colon", description="chat renderer of every phase")
    dataset: str = Field(TRAIN, description="comparison file (train)")
    eval_dataset: str | None = Field(TEST, description="comparison file (held out)")
    reward_judge: str = Field(PREFERENCE_MODEL, description="RL rewards: preference_model, or a rule judge")
    win_rate_judge: str | None = Field("polite_arithmetic", description="judge of the RL policy's win rate")
    sft_checkpoint: str | None = Field(None, description="phases 2-3 start here; default RUN_DIR/sft")
    preference_model_checkpoint: str | None = Field(
        None, description="phase 3's judge; default RUN_DIR/preference_model"
    )
    sft: dict[str, Any] = Field(default_factory=dict, description="phase 1 keys (rlhf_sft settings)")
    preference_model: dict[str, Any] = Field(default_factory=dict, description="phase 2 keys")
    rl: dict[str, Any] = Field(default_factory=dict, description="phase 3 keys (RL settings)")

    @field_validator("reward_judge", "win_rate_judge")
    @classmethod
    def _judges(cls, name: str | None) -> str | None:
        return _judge_name(name, learned_ok=True)

    @model_validator(mode="after")
    def _phases_valid(self) -> Config:
        for phase in PHASES:
            phase_config(self, phase, Path(self.log_path or "RUN_DIR"))
        return self

    def phases(self) -> tuple[Phase, ...]:
        return PHASES if self.phase == "all" else (self.phase,)


def phase_config(config: Config, phase: Phase, run_dir: Path) -> Any:
    """The config of one phase's sub-run: the shared keys, the paths it takes from earlier phases,
    then the phase's own section (which wins)."""
    cls = PHASE_RECIPES[phase].config_cls
    data: dict[str, Any] = {key: getattr(config, key) for key in SHARED_KEYS if key in cls.model_fields}
    data.update({name: getattr(config, name).model_dump() for name in backend_specs()})
    data["log_path"] = str(run_dir / phase)
    if phase != "sft":
        data["load_checkpoint_path"] = config.sft_checkpoint or str(run_dir / "sft")
    if phase == "rl" and config.reward_judge == PREFERENCE_MODEL:
        data["judge_model"] = {"checkpoint": config.preference_model_checkpoint or str(run_dir / PREFERENCE_MODEL)}
    data.update(getattr(config, phase))
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{phase}.{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(problems) from None


class RunPhase(Stage):
    """Run one phase as a sub-run in `RUN_DIR/<phase>`, unless it already finished there (resume
    at a phase boundary); an unfinished phase resumes from its own last checkpoint. Logs the
    phase's wall time as `time/phase_<phase>`."""

    def __init__(self, phase: Phase) -> None:
        super().__init__(f"phase_{phase}")
        self.phase = phase

    def check_inputs(self, config: Any) -> None:
        """The phase's own stages' checks, so the whole run's data is checked before phase 1."""
        phase = phase_config(config, self.phase, Path(config.log_path or "RUN_DIR"))
        for stage in PHASE_RECIPES[self.phase].workflow(phase).stages():
            stage.check_inputs(phase)

    async def run(self, ctx: Context, service: ServiceBackend, config: Config) -> None:
        run_dir = ctx.run_dir or Path(".")
        phase = phase_config(config, self.phase, run_dir)
        sub_dir = run_dir / self.phase
        if phase.resume == "auto" and finished(sub_dir):
            ctx.log.info("phase.skipped", phase=self.phase, reason="finished", log_path=str(sub_dir))
            return
        if phase.load_checkpoint_path:
            phase.load_checkpoint_path = self._state(phase.load_checkpoint_path, "sft", "sft_checkpoint")
        if self.phase == "rl" and phase.reward_judge == PREFERENCE_MODEL and phase.judge_model.checkpoint:
            self._state(phase.judge_model.checkpoint, PREFERENCE_MODEL, "preference_model_checkpoint")
        hooks = [hook for hook in ctx.hooks if not isinstance(hook, ProgressHook)]
        progress = any(isinstance(hook, ProgressHook) for hook in ctx.hooks)
        ctx.log.info("phase.start", phase=self.phase, log_path=str(sub_dir))
        started = time.perf_counter()
        backend = PhaseBackend(service, self.phase)
        await run_recipe_async(PHASE_RECIPES[self.phase], phase, hooks=hooks, progress=progress, backend=backend)
        seconds = time.perf_counter() - started
        ctx.record({f"time/phase_{self.phase}": seconds})
        ctx.log.info("phase.end", phase=self.phase, seconds=round(seconds, 3))

    def _state(self, path: str, earlier: str, key: str) -> str:
        if not Path(path).exists() and "://" not in path:
            raise ConfigError(
                f"phase {self.phase} starts from {path}, which does not exist: run phase={earlier} first "
                f"(same log_path) or set {key}"
            )
        return resolve_state_path(path)


class RecordFinalPhase(Stage):
    """A `final` record in the run's own checkpoints.jsonl pointing at the last phase's final
    weights, so the run directory can be named wherever a checkpoint is expected (e.g. as a
    teacher or a judge: the RL policy after phase=all)."""

    def __init__(self, phase: Phase) -> None:
        super().__init__("record_final_phase")
        self.phase = phase

    async def run(self, ctx: Context) -> None:
        if ctx.run_dir is None:
            return
        records = [r for r in read_records(ctx.run_dir / self.phase / "checkpoints.jsonl") if r.name == "final"]
        if records:
            last = records[-1]
            final = CheckpointRecord("final", 0, state_path=last.state_path, sampler_path=last.sampler_path)
            append_record(ctx.run_dir / "checkpoints.jsonl", final)


def workflow(config: Config) -> Workflow:
    """One stage per phase to run; each phase's own workflow is checked now, before any work."""
    for phase in config.phases():
        validate_recipe(PHASE_RECIPES[phase], phase_config(config, phase, Path(config.log_path or "RUN_DIR")))
    steps: list[Node] = [RunPhase(phase) for phase in config.phases()]
    return Workflow("rlhf", steps=[*steps, RecordFinalPhase(config.phases()[-1])], finally_=[CloseBackend()])


RECIPE = Recipe(
    name="rlhf",
    description="RLHF from pairwise preferences: SFT, a preference model, then RL with tournament rewards",
    config_cls=Config,
    workflow=workflow,
)
