"""RLHF from pairwise preferences, in three phases that also run alone (`phase=...`).

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

Per-phase keys go in the `sft`, `preference_model` and `rl` sections (e.g. `rl.rl.num_batches=10`:
the RL phase's `rl` section); shared keys (model, backend, seed, renderer, the comparison files
in `data`) are set once at the top. A recipe supplies the phases' recipes (with its defaults) and
the rule judges (`rlhf_workflow_for`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from kitchen.engine.backends import backend_specs
from kitchen.engine.config.renames import translate
from kitchen.engine.config.run import Count
from kitchen.engine.config.sections import ConfigRef, Section, merged
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
from kitchen.families.common.setup import CloseBackend, CreateReferenceClient
from kitchen.families.preference.judges import PREFERENCE_MODEL, judge_setup
from kitchen.families.preference.reward_model import (
    EvaluatePreferenceModel,
    WriteComparisonConversations,
    check_comparison_files,
    read_comparisons,
)
from kitchen.families.preference.settings import ComparisonData, ComparisonFiles, JudgeEvalSettings, WinRateSettings
from kitchen.families.preference.stages import EvaluateWinRate, Judge
from kitchen.families.rl.step import ApplyKLPenalty
from kitchen.families.rl.workflow import rl_workflow
from kitchen.families.supervised.examples import Conversation
from kitchen.families.supervised.settings import ChatSupervisedSettings
from kitchen.families.supervised.workflow import supervised_workflow
from train_core.renderers.base import Message, Renderer
from train_core.rl.pairwise_preference import JudgeSlot, PairwisePreferenceDataset
from train_core.rl.task import RLTask
from train_core.rl.tournament import PairScheme

Phase = Literal["sft", "preference_model", "rl"]
PHASES: tuple[Phase, ...] = ("sft", "preference_model", "rl")
Rules = Callable[[str], Judge]
"""A recipe's rule judges by name (a ConfigError for an unknown one)."""


# -- the phases' settings --------------------------------------------------------------------


class SFTPhase(ChatSupervisedSettings):
    """Phase 1: SFT on the comparisons' completions."""

    data: ComparisonData = Field(..., description="the comparison files, batches and epochs")
    examples: Literal["chosen", "both"] = Field(
        "both", description="train on the chosen completions, or on chosen and rejected alike"
    )


class PreferenceModelPhase(ChatSupervisedSettings):
    """Phase 2: a pairwise preference model, trained as chat examples answered A or B."""

    data: ComparisonData = Field(..., description="the comparison files, batches and epochs")
    judge_eval: JudgeEvalSettings = Field(default_factory=JudgeEvalSettings, description="its held-out judge metrics")


class TournamentSettings(Section):
    """Config section `tournament` of the RL phase: each group's samples compared pairwise by a judge."""

    FLAT: ClassVar[Mapping[str, str]] = {
        "pair_scheme": "pair_scheme",
        "judge": "reward_judge",
        "judge_model": "judge_model",
        "max_concurrent": "judge_max_concurrent",
    }

    pair_scheme: PairScheme = Field(
        "one_way", description="all pairs one_way, or both_ways (cancels a judge's position bias)"
    )
    judge: str = Field(PREFERENCE_MODEL, description="preference_model (judge_model), or a rule judge")
    judge_model: OtherModel = Field(default_factory=OtherModel, description="the learned judge's checkpoint")
    max_concurrent: Count = Field(64, description="judge calls in flight at once")


class RLPhase(RendererSettings):
    """Phase 3's keys beyond RL's: the comparison files its prompts come from, the tournament that
    rewards the samples, the win rate against the SFT policy. Subclassed with `RLSettings`."""

    data: ComparisonFiles = Field(..., description="comparison files whose prompts RL samples for and evaluates on")
    tournament: TournamentSettings = Field(default_factory=TournamentSettings, description="the reward")
    win_rate: WinRateSettings = Field(default_factory=WinRateSettings, description="the win rate against SFT")


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


def tournament_task(config: Any, renderer: Renderer) -> RLTask:
    """RL on the comparison file's prompts, each group rewarded by a tournament whose judge a
    stage binds once the run has opened it (`BindJudge`)."""
    data, tournament = config.data, config.tournament
    comparisons = read_comparisons(data.dataset, data.dataset_layout)
    prompts = [labeled.comparison.prompt_conversation for labeled in comparisons]
    dataset = PairwisePreferenceDataset(
        prompts,
        renderer,
        JudgeSlot(max_concurrent=tournament.max_concurrent),
        config.rl.groups_per_batch,
        config.rl.group_size,
        config.seed,
        tournament.pair_scheme,
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

    async def run(self, data: ComparisonFiles) -> EvalPrompts:
        path = data.eval_dataset
        comparisons = read_comparisons(path, data.dataset_layout) if path else []
        return EvalPrompts([labeled.comparison.prompt_conversation for labeled in comparisons])


TOURNAMENT_JUDGE = ConfigRef(TournamentSettings, lambda tournament: tournament.judge_model)
WIN_RATE_JUDGE = ConfigRef(WinRateSettings, lambda win_rate: win_rate.judge_model)


def rl_phase_workflow(config: Any, rules: Rules) -> Workflow:
    """RL with tournament rewards; the frozen reference is the policy RL starts from (the SFT
    policy): the KL penalty's anchor and the win rate's opponent. `config` is an `RLPhase` that is
    also an `RLSettings`."""
    tournament, win_rate = config.tournament, config.win_rate
    setup: list[Node] = [
        CreateReferenceClient(),
        *judge_setup(tournament.judge, TOURNAMENT_JUDGE, tournament.judge_model, rules),
        BindJudge(),
        LoadEvalPrompts(),
    ]
    evaluators: list[Node] = []
    after: list[Node] = []
    if win_rate.judge is not None:
        if win_rate.judge == PREFERENCE_MODEL:
            if tournament.judge != PREFERENCE_MODEL:
                raise ConfigError(
                    "win_rate_judge=preference_model needs reward_judge=preference_model (one judge_model)"
                )
            judge_key = "judge"
        else:
            judge_key = "win_rate_judge"
            setup += judge_setup(win_rate.judge, WIN_RATE_JUDGE, win_rate.judge_model, rules, judge_key=judge_key)
        evaluators = [EvaluateWinRate(judge_key=judge_key)]
        after = [EvaluateWinRate("final_win_rate", judge_key=judge_key)]
    adjust: list[Node] = [ApplyKLPenalty()] if config.algorithm.kl_penalty_coef > 0 else []
    return rl_workflow(
        tournament_task,
        config.rl.mode,
        setup=setup,
        adjust=adjust,
        evaluators=evaluators,
        after_training=after,
        check_data=lambda phase, roles: check_comparison_files(phase),
    )


# -- the recipe --------------------------------------------------------------------------------


class RLHFSettings(RendererSettings):
    """The three phases' shared keys, where each phase starts from, and each phase's own keys."""

    phase: Literal["sft", "preference_model", "rl", "all"] = Field("all", description="run one phase, or all three")
    data: ComparisonFiles = Field(..., description="the comparison files every phase reads")
    reward_judge: str = Field(PREFERENCE_MODEL, description="RL rewards: preference_model, or a rule judge")
    win_rate_judge: str | None = Field("polite_arithmetic", description="judge of the RL policy's win rate")
    sft_checkpoint: str | None = Field(None, description="phases 2-3 start here; default RUN_DIR/sft")
    preference_model_checkpoint: str | None = Field(
        None, description="phase 3's judge; default RUN_DIR/preference_model"
    )
    sft: dict[str, Any] = Field(default_factory=dict, description="phase 1 keys (rlhf_sft settings)")
    preference_model: dict[str, Any] = Field(default_factory=dict, description="phase 2 keys")
    rl: dict[str, Any] = Field(default_factory=dict, description="phase 3 keys (RL settings)")

    def phases(self) -> tuple[Phase, ...]:
        return PHASES if self.phase == "all" else (self.phase,)


SHARED_KEYS = ("model_name", "backend", "seed", "lora_rank", "resume", "renderer")
"""The run keys every phase takes from the top of the config."""


def phase_config(recipes: Mapping[str, Recipe], config: RLHFSettings, phase: Phase, run_dir: Path) -> Any:
    """The config of one phase's sub-run: the shared keys, the paths it takes from earlier phases,
    then the phase's own section (which wins; 0.2's flat names in it are renamed)."""
    cls = recipes[phase].config_cls
    dumped = config.model_dump()
    data: dict[str, Any] = {key: dumped[key] for key in SHARED_KEYS}
    data.update({name: dumped[name] for name in backend_specs()})
    data["data"] = dumped["data"]
    data["log_path"] = str(run_dir / phase)
    if phase != "sft":
        data["load_checkpoint_path"] = config.sft_checkpoint or str(run_dir / "sft")
    if phase == "rl":
        tournament: dict[str, Any] = {"judge": config.reward_judge}
        if config.reward_judge == PREFERENCE_MODEL:
            model = config.preference_model_checkpoint or str(run_dir / PREFERENCE_MODEL)
            tournament["judge_model"] = {"checkpoint": model}
        data["tournament"] = tournament
        data["win_rate"] = {"judge": config.win_rate_judge}
    own = translate(cls, getattr(config, phase), phase)
    try:
        return cls.model_validate(merged(data, own, cls))
    except ValidationError as exc:
        problems = "; ".join(
            f"{phase}.{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(problems) from None


class RunPhase(Stage):
    """Run one phase as a sub-run in `RUN_DIR/<phase>`, unless it already finished there (resume
    at a phase boundary); an unfinished phase resumes from its own last checkpoint. Logs the
    phase's wall time as `time/phase_<phase>`."""

    def __init__(self, recipes: Mapping[str, Recipe], phase: Phase) -> None:
        super().__init__(f"phase_{phase}")
        self.recipes = recipes
        self.phase = phase

    def check_inputs(self, config: Any) -> None:
        """The phase's own stages' checks, so the whole run's data is checked before phase 1."""
        phase = phase_config(self.recipes, config, self.phase, Path(config.log_path or "RUN_DIR"))
        for stage in self.recipes[self.phase].workflow(phase).stages():
            stage.check_inputs(phase)

    async def run(self, ctx: Context, service: ServiceBackend, config: RLHFSettings) -> None:
        run_dir = ctx.run_dir or Path(".")
        phase = phase_config(self.recipes, config, self.phase, run_dir)
        sub_dir = run_dir / self.phase
        if phase.resume == "auto" and finished(sub_dir):
            ctx.log.info("phase.skipped", phase=self.phase, reason="finished", log_path=str(sub_dir))
            return
        if phase.load_checkpoint_path:
            phase.load_checkpoint_path = self._state(phase.load_checkpoint_path, "sft", "sft_checkpoint")
        judged_by = phase.tournament if self.phase == "rl" else None
        if judged_by is not None and judged_by.judge == PREFERENCE_MODEL and judged_by.judge_model.checkpoint:
            self._state(judged_by.judge_model.checkpoint, PREFERENCE_MODEL, "preference_model_checkpoint")
        hooks = [hook for hook in ctx.hooks if not isinstance(hook, ProgressHook)]
        progress = any(isinstance(hook, ProgressHook) for hook in ctx.hooks)
        ctx.log.info("phase.start", phase=self.phase, log_path=str(sub_dir))
        started = time.perf_counter()
        backend = PhaseBackend(service, self.phase)
        await run_recipe_async(self.recipes[self.phase], phase, hooks=hooks, progress=progress, backend=backend)
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


def check_phases(recipes: Mapping[str, Recipe], config: RLHFSettings) -> None:
    """Every phase's config, built now: a bad phase key fails when the config loads."""
    for phase in PHASES:
        phase_config(recipes, config, phase, Path(config.log_path or "RUN_DIR"))


def rlhf_workflow_for(recipes: Mapping[str, Recipe]) -> Callable[[RLHFSettings], Workflow]:
    """A recipe's `workflow(config)`: one stage per phase to run (each phase's own workflow is
    checked now, before any work), then the final record."""

    def build(config: RLHFSettings) -> Workflow:
        for phase in config.phases():
            validate_recipe(recipes[phase], phase_config(recipes, config, phase, Path(config.log_path or "RUN_DIR")))
        steps: list[Node] = [RunPhase(recipes, phase) for phase in config.phases()]
        return Workflow("rlhf", steps=[*steps, RecordFinalPhase(config.phases()[-1])], finally_=[CloseBackend()])

    return build
