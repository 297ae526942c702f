"""Every field of TRL 1.16's SFT, DPO, GRPO, KTO, reward and GKD configs, and where it lives in
kitchen: a config key of the recipe a TRL user ports to, or why there is none.

The porting guide (docs/how-to/from-trl.md, written by `docs/gen/trl_guide.py`) is generated from
this table, and tests/documentation/test_trl_guide.py reads it too: a field TRL adds or drops, or a
kitchen key that moves, fails there instead of leaving the guide wrong.

A field is looked up along its config class's TRL ancestry (`GKDConfig` -> `SFTConfig` ->
`TrainingArguments`), so a row for a class overrides the row of the class it inherits from.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One TRL field: its kitchen keys, or none and the reason in `note`; `note` also says where
    kitchen's meaning differs from TRL's. A key is dotted, in the config of the recipe its TRL class
    ports to (`RECIPES`), or of another recipe named before a colon (`chat_sl:renderer`)."""

    trl_class: str
    field: str
    keys: tuple[str, ...]
    note: str


# The TRL config classes the guide covers, in its order, with the kitchen recipe each ports to.
RECIPES: dict[str, str] = {
    "SFTConfig": "sl_basic",
    "DPOConfig": "dpo",
    "GRPOConfig": "reward_fn_rl",
    "KTOConfig": "kto",
    "RewardConfig": "rm",
    "GKDConfig": "gkd",
}
# The base classes whose rows the configs above inherit (TRL's own `_BaseConfig` adds no field).
BASES = ("TrainingArguments",)

HF_RUNTIME = "transformers `Trainer` runtime; kitchen's backends run the model themselves"
HUB = "the Hub: `kitchen export RUN_DIR` writes a Hugging Face model folder, upload it with `hf upload`"
NO_MODEL_KWARGS = "`from_pretrained` kwargs: the local backend loads `model_name` itself (dtype: `local.dtype`)"
DISTRIBUTED = "distribution is `local.num_workers` (FSDP2 over Ray actors), see the distributed how-to"
EVAL_LOOP = "kitchen's held-out evaluation computes its own metrics every `eval.every` steps"
NO_DROPOUT = "kitchen always trains with dropout off (the model stays in eval mode), as `True` does"
NOT_YET = "not supported yet"
PACK = "the local backend always packs a batch's sequences into shared rows, each seeing only itself"
RL_BATCH = "RL batches are `rl.groups_per_batch` prompts x `rl.group_size` samples"


def _rows(trl_class: str, table: str) -> list[Row]:
    """Rows from lines `field | keys (space-separated, or -) | note`, a long note going on in
    indented lines."""
    rows: list[Row] = []
    for line in table.strip().splitlines():
        if line.startswith(" "):  # an indented line goes on with the note above it
            rows[-1] = rows[-1]._replace(note=f"{rows[-1].note} {line.strip()}")
            continue
        field, keys, note = (part.strip() for part in line.split("|", 2))
        rows.append(Row(trl_class, field, () if keys == "-" else tuple(keys.split()), note))
    return rows


_TRAINING_ARGUMENTS = _rows(
    "TrainingArguments",
    f"""
output_dir | log_path | the run directory (config, metrics, checkpoints)
do_train | - | `kitchen run` trains; there is no flag
do_eval | eval.every | held-out evaluation runs every `eval.every` steps (0 = never)
do_predict | - | `kitchen eval` or `kitchen sample` on a checkpoint
eval_strategy | eval.every | steps only; no per-epoch evaluation
prediction_loss_only | - | {EVAL_LOOP}
per_device_train_batch_size | data.batch_size | kitchen's batch is records per optimizer step over all devices
    (TRL's x devices x `gradient_accumulation_steps`)
per_device_eval_batch_size | - | held-out data is scored in batches the backend picks
gradient_accumulation_steps | - | fold into `data.batch_size`; `local.max_tokens_per_microbatch` splits a large
    batch into micro-batches
eval_accumulation_steps | - | {EVAL_LOOP}
eval_delay | - | {NOT_YET}: evaluation starts at step `eval.every`
torch_empty_cache_steps | - | {HF_RUNTIME}
learning_rate | optimizer.learning_rate | kitchen's defaults are per recipe, not TRL's
weight_decay | optimizer.weight_decay |
adam_beta1 | optimizer.adam_beta1 |
adam_beta2 | optimizer.adam_beta2 | kitchen's default is 0.95 (TRL's 0.999)
adam_epsilon | optimizer.adam_eps |
max_grad_norm | optimizer.grad_clip_norm | kitchen's default 0 disables clipping (TRL's is 1.0)
num_train_epochs | data.num_epochs |
max_steps | data.max_steps |
lr_scheduler_type | optimizer.lr_schedule | `linear`, `cosine`, `constant` only
lr_scheduler_kwargs | - | {NOT_YET}
warmup_steps | optimizer.warmup_steps | steps only (TRL also takes a fraction below 1)
log_level | - | kitchen's console log is fixed; `--debug` shows tracebacks
log_level_replica | - | {DISTRIBUTED}
log_on_each_node | - | {DISTRIBUTED}
logging_first_step | - | kitchen logs every step to RUN_DIR/metrics.jsonl
logging_steps | - | kitchen logs every step to RUN_DIR/metrics.jsonl
logging_strategy | - | kitchen logs every step to RUN_DIR/metrics.jsonl
logging_nan_inf_filter | max_bad_steps | kitchen does not apply a NaN/inf step, and stops after `max_bad_steps` in a row
save_strategy | checkpoint.save_every | steps only
save_steps | checkpoint.save_every |
save_total_limit | checkpoint.keep_last | `checkpoint.keep_every` also keeps every Nth
enable_jit_checkpoint | - | {HF_RUNTIME}
save_on_each_node | - | {DISTRIBUTED}
save_only_model | - | kitchen's checkpoints always hold the optimizer state, so a run resumes exactly
restore_callback_states_from_checkpoint | - | kitchen has no callbacks; a resumed run restores its whole state
use_cpu | local.device | `local.device=cpu`
seed | seed | one seed for data order, sampling and the tiny model's weights
data_seed | - | `seed` also orders the data
bf16 | local.dtype | `local.dtype=bfloat16`
fp16 | local.dtype | `local.dtype=float16`
bf16_full_eval | - | evaluation runs in `local.dtype`
fp16_full_eval | - | evaluation runs in `local.dtype`
tf32 | - | {HF_RUNTIME}
local_rank | - | {DISTRIBUTED}
ddp_backend | - | {DISTRIBUTED}
debug | - | `kitchen --debug` shows tracebacks; no torch debug modes
dataloader_drop_last | - | supervised and preference steps take full batches only, as `True` does
eval_steps | eval.every |
dataloader_num_workers | - | kitchen reads and tokenizes records in the training process
dataloader_prefetch_factor | - | kitchen reads and tokenizes records in the training process
dataloader_persistent_workers | - | kitchen reads and tokenizes records in the training process
dataloader_pin_memory | - | kitchen reads and tokenizes records in the training process
dataloader_in_order | - | kitchen reads and tokenizes records in the training process
dataloader_multiprocessing_context | - | kitchen reads and tokenizes records in the training process
run_name | logging.wandb.name | also `logging.mlflow.run_name`; both default to the run directory's name
disable_tqdm | - | kitchen prints one line per step, no progress bar
remove_unused_columns | - | kitchen reads only the columns its data layout names
label_names | - | the data layout names the columns
load_best_model_at_end | eval.best_checkpoint | kitchen records the best checkpoint (`eval.best_checkpoint.metric`)
    and keeps it on disk; it does not reload it
metric_for_best_model | eval.best_checkpoint.metric |
greater_is_better | eval.best_checkpoint.mode | `max` or `min`
ignore_data_skip | - | a resumed run always continues where its data stopped
accelerator_config | - | {HF_RUNTIME}
parallelism_config | - | {DISTRIBUTED}
deepspeed | - | {DISTRIBUTED}; no DeepSpeed
fsdp | local.num_workers | N > 1 shards the model with FSDP2; no other FSDP options
fsdp_config | - | {DISTRIBUTED}
ddp_find_unused_parameters | - | {DISTRIBUTED}
ddp_bucket_cap_mb | - | {DISTRIBUTED}
ddp_broadcast_buffers | - | {DISTRIBUTED}
ddp_static_graph | - | {DISTRIBUTED}
ddp_timeout | local.worker_timeout_s | how long one training call may take on the workers
label_smoothing_factor | - | {NOT_YET} (TRL's Trainer smooths the labels of the cross-entropy)
optim | - | AdamW only; its settings are under `optimizer`
optim_args | - | AdamW only; its settings are under `optimizer`
optim_target_modules | - | {NOT_YET}
report_to | logging.loggers | `tensorboard`, `wandb`, `mlflow`; metrics.jsonl is always written
project | logging.wandb.project | also `logging.mlflow.experiment`
trackio_space_id | - | {NOT_YET}: no trackio sink (tensorboard, wandb, mlflow)
trackio_bucket_id | - | {NOT_YET}: no trackio sink (tensorboard, wandb, mlflow)
trackio_static_space_id | - | {NOT_YET}: no trackio sink (tensorboard, wandb, mlflow)
push_to_hub | - | {HUB}
resume_from_checkpoint | resume | `resume: auto` continues from the run directory's last checkpoint;
    `load_checkpoint_path` starts from other weights with a fresh optimizer
hub_model_id | - | {HUB}
hub_strategy | - | {HUB}
hub_token | - | {HUB}
hub_private_repo | - | {HUB}
hub_always_push | - | {HUB}
hub_revision | - | {HUB}
gradient_checkpointing | local.gradient_checkpointing |
gradient_checkpointing_kwargs | - | {HF_RUNTIME}
activation_checkpointing | local.gradient_checkpointing | kitchen's one activation-recomputation switch
activation_checkpointing_kwargs | - | {HF_RUNTIME}
include_for_metrics | - | {EVAL_LOOP}
eval_do_concat_batches | - | {EVAL_LOOP}
auto_find_batch_size | - | {NOT_YET}: `local.max_tokens_per_microbatch` bounds the memory of a step instead
full_determinism | - | runs with the same seed are reproducible on CPU; no cuDNN determinism switch
torch_compile | local.compile |
torch_compile_backend | - | `local.compile` uses torch's default backend
torch_compile_mode | - | `local.compile` uses torch's default mode
include_num_input_tokens_seen | - | kitchen logs each step's trained tokens (`num_tokens`) in metrics.jsonl
neftune_noise_alpha | - | {NOT_YET}
batch_eval_metrics | - | {EVAL_LOOP}
eval_on_start | - | {NOT_YET}: evaluation runs at step `eval.every` and at the end
use_liger_kernel | local.logprob_method | `liger` uses Liger's fused linear cross-entropy for the logprobs only
liger_kernel_config | - | {NOT_YET}
eval_use_gather_object | - | {DISTRIBUTED}
average_tokens_across_devices | - | kitchen's loss is over the whole batch, whatever the number of workers
use_cache | - | {HF_RUNTIME}; kitchen's sampler keeps its own KV cache
skip_memory_metrics | - | kitchen does not log memory
length_column_name | - | {NOT_YET}: no length-grouped batches
train_sampling_strategy | - | kitchen shuffles the records each epoch with `seed`
""",
)

# Fields that TRL's configs share (each declares its own copy): one text, several classes.
_SHARED = """
model_init_kwargs | - | {kwargs}
trust_remote_code | - | {NOT_YET}: the local backend loads models without remote code
router_aux_loss_coef | - | {NOT_YET}: no mixture-of-experts router loss
dataset_num_proc | - | kitchen tokenizes in the training process
pad_to_multiple_of | - | {PACK}; no padding to a multiple
activation_offloading | - | {NOT_YET}
"""


def _shared(trl_class: str, *fields: str) -> list[Row]:
    text = _SHARED.format(kwargs=NO_MODEL_KWARGS, NOT_YET=NOT_YET, PACK=PACK)
    return [row for row in _rows(trl_class, text) if row.field in fields]


_COMMON = ("model_init_kwargs", "trust_remote_code", "dataset_num_proc", "pad_to_multiple_of")

_SFT = _shared("SFTConfig", *_COMMON, "router_aux_loss_coef", "activation_offloading") + _rows(
    "SFTConfig",
    f"""
chat_template_path | chat_sl:renderer | `chat_sl`'s `renderer` names kitchen's chat template (a renderer), not a
    Jinja file
dataset_text_field | data.text_key | language-modeling records; `data.prompt_key` / `data.completion_key` for
    prompt-completion ones
dataset_kwargs | - | {NOT_YET}
eos_token | - | the renderer (or the tokenizer) ends each reply
max_length | data.max_length |
truncation_mode | - | records longer than `data.max_length` are cut at the end, as `keep_start`
shuffle_dataset | - | kitchen always shuffles, each epoch, with `seed`
packing | - | {PACK} (a prefix shared by several sequences runs once), so there is no switch
packing_strategy | - | kitchen's packing has one strategy (a prefix tree per batch)
padding_free | - | {PACK}
eval_packing | - | held-out batches are packed the same way
completion_only_loss | - | prompt-completion records never train the prompt
assistant_only_loss | chat_sl:data.train_on_what | conversations train `all_assistant_messages`,
    `last_assistant_message`, ...
loss_type | - | `nll` only; `dft` is {NOT_YET}
pad_token | - | the tokenizer's own; rows are unpadded
""",
)

_DPO = _shared("DPOConfig", *_COMMON, "router_aux_loss_coef", "activation_offloading") + _rows(
    "DPOConfig",
    f"""
disable_dropout | - | {NO_DROPOUT}
max_length | data.max_length |
truncation_mode | - | pairs longer than `data.max_length` are cut at the end, as `keep_start`
padding_free | - | {PACK}
precompute_ref_log_probs | - | kitchen scores each step's batch with the frozen reference (the starting weights);
    precomputing over the whole data set is {NOT_YET}
precompute_ref_batch_size | - | see `precompute_ref_log_probs`
loss_type | dpo.loss_type | TRL's 15 names (one or a list), plus kitchen's `cdpo`, `simpo`, `orpo` and CPO's
    `alphapo` (`dpo.alphapo_alpha`); equal to TRL's computation (tests/rlhf)
loss_weights | dpo.loss_weights |
ld_alpha | dpo.ld_alpha |
f_divergence_type | dpo.f_divergence_type |
f_alpha_divergence_coef | dpo.f_alpha_divergence_coef |
label_smoothing | dpo.label_smoothing | used by `cdpo`, `robust`, `exo_pair`, `aot`, `aot_unpaired`; TRL before 1.0
    smoothed inside `sigmoid`: say `cdpo`
beta | dpo.beta |
use_weighting | dpo.use_weighting | WPO weights: local backend
discopop_tau | dpo.discopop_tau |
sync_ref_model | dpo.sync_ref_model | TR-DPO
ref_model_mixup_alpha | dpo.ref_model_mixup_alpha | a mix below 1 needs the local backend and full fine-tuning
ref_model_sync_steps | dpo.ref_model_sync_steps |
pad_token | - | the tokenizer's own; rows are unpadded
""",
)

_GRPO = _shared(
    "GRPOConfig", "model_init_kwargs", "trust_remote_code", "router_aux_loss_coef", "pad_to_multiple_of"
) + _rows(
    "GRPOConfig",
    f"""
per_device_train_batch_size | rl.groups_per_batch | {RL_BATCH}: TRL's samples per step / `num_generations` prompts
num_train_epochs | - | RL steps are counted in `rl.num_batches`; prompts are drawn again once used up
max_steps | rl.num_batches |
disable_dropout | - | {NO_DROPOUT}
cast_lm_head_to_fp32 | - | `local.dtype` applies to the whole model; {NOT_YET} for the head alone
num_generations | rl.group_size |
num_generations_eval | - | held-out prompts are answered `rl.group_size` times too; no separate count
max_completion_length | sampling.max_tokens |
ds3_gather_for_generation | - | {DISTRIBUTED}; no DeepSpeed
shuffle_dataset | - | prompts are always shuffled with `seed`
generation_batch_size | - | {RL_BATCH}, all sampled at once
steps_per_generation | rl.num_substeps | optimizer steps per sampled batch, each on its own share of the batch
temperature | sampling.temperature |
top_p | - | {NOT_YET} in training rollouts
top_k | - | {NOT_YET} in training rollouts
min_p | - | {NOT_YET} in training rollouts
generation_kwargs | - | {NOT_YET}
chat_template_kwargs | - | the renderer decides the template (e.g. a thinking renderer)
repetition_penalty | - | {NOT_YET}
cache_implementation | - | kitchen's sampler keeps its own KV cache
use_vllm | local.sampler | `local.sampler=vllm` (a colocated engine)
vllm_mode | local.vllm.placement | `colocated` or `separate` (with `local.num_workers` > 1); no remote server mode
vllm_model_impl | - | {NOT_YET}
vllm_enable_sleep_mode | local.vllm.sleep |
vllm_structured_outputs_regex | - | {NOT_YET}
vllm_server_base_url | - | no remote vLLM server mode; `local.vllm.placement=separate` runs the engine as its own actor
vllm_server_host | - | no remote vLLM server mode
vllm_server_port | - | no remote vLLM server mode
vllm_server_timeout | local.vllm.start_timeout_s | how long the engine may take to start
vllm_group_port | - | no remote vLLM server mode
vllm_gpu_memory_utilization | local.vllm.gpu_memory_utilization |
vllm_max_model_length | local.vllm.max_model_len |
vllm_tensor_parallel_size | local.vllm.tensor_parallel_size |
beta | algorithm.kl_loss_coef | KL to the reference in the loss, `algorithm.kl_loss_estimator: k3` as TRL;
    `algorithm.kl_penalty_coef` puts it in the reward instead
num_iterations | - | {NOT_YET}: each sample is trained on once; `rl.num_substeps` (TRL's `steps_per_generation`)
    splits a batch into several optimizer steps, the later ones off-policy
epsilon | algorithm.clip_ratio_low | with `algorithm.loss_fn: ppo`
delta | algorithm.clip_ratio_c | kitchen's dual clip: the same loss and gradient as TRL's two-sided clip for `delta`
    > 1 + `epsilon_high`
epsilon_high | algorithm.clip_ratio_high | with `algorithm.loss_fn: ppo`
sapo_temperature_neg | algorithm.loss_fn_config | `temperature_neg` (with `algorithm.preset: sapo`)
sapo_temperature_pos | algorithm.loss_fn_config | `temperature_pos` (with `algorithm.preset: sapo`)
vespo_k_pos | algorithm.loss_fn_config | `k_pos` (with `algorithm.preset: vespo`)
vespo_lambda_pos | algorithm.loss_fn_config | `lambda_pos` (with `algorithm.preset: vespo`)
vespo_k_neg | algorithm.loss_fn_config | `k_neg` (with `algorithm.preset: vespo`)
vespo_lambda_neg | algorithm.loss_fn_config | `lambda_neg` (with `algorithm.preset: vespo`)
importance_sampling_level | algorithm.loss_fn | `sequence` is `algorithm.loss_fn: gspo` (presets `gspo`, `luspo`);
    `token` is `ppo`
reward_weights | env.reward_weights | a weight per reward function's name (`{{name: weight}}`), not a list in order
multi_objective_aggregation | - | `sum_then_normalize` only (weighted sum, then `algorithm.scale_rewards`);
    `normalize_then_sum` is {NOT_YET}
scale_rewards | algorithm.scale_rewards | `group`, `batch`, `none` (with `algorithm.advantage_estimator: grpo`)
loss_type | algorithm.preset | `grpo`, `dr_grpo`, `dapo`, `bnpo`, `cispo`, `sapo`, `luspo`, `vespo`: the preset's
    loss, clip and aggregation equal TRL's for that name; a preset also sets other keys (its `dapo` adds dynamic
    sampling and overlong shaping), any key you set still wins
mask_truncated_completions | algorithm.overlong_filter | cut replies leave the loss but stay in their group's baseline
sync_ref_model | - | {NOT_YET} for RL (the `dpo` recipe has it)
ref_model_mixup_alpha | - | {NOT_YET} for RL (the `dpo` recipe has it)
ref_model_sync_steps | - | {NOT_YET} for RL (the `dpo` recipe has it)
top_entropy_quantile | algorithm.top_entropy_quantile | local backend (it needs the policy's per-token entropies);
    equal to TRL's mask and loss, except that kitchen takes the quantile in the entropies' dtype (TRL: float32)
entropy_coef | algorithm.entropy_coeff | local backend; aggregated as the policy loss is
    (`algorithm.loss_aggregation`), where TRL always takes the per-token mean
use_adaptive_entropy | - | {NOT_YET}
entropy_coef_min | - | {NOT_YET} (adaptive entropy)
entropy_coef_max | - | {NOT_YET} (adaptive entropy)
entropy_coef_delta | - | {NOT_YET} (adaptive entropy)
entropy_target | - | {NOT_YET} (adaptive entropy)
max_tool_calling_iterations | episode.max_turns | tool use is an environment's (`env_rl`, `tool_rl`); `reward_fn_rl`
    is single-turn
vllm_importance_sampling_correction | algorithm.rollout_correction | `tis` (truncate) or `mis` (mask); not yet
    checked against TRL's computation
vllm_importance_sampling_mode | algorithm.rollout_correction.tis | `token` or `sequence` for the `*_truncate` modes;
    `algorithm.rollout_correction.mis` for the `*_mask` modes
vllm_importance_sampling_clip_max | algorithm.rollout_correction.tis_cap | `algorithm.rollout_correction.mis_high`
    for the `*_mask` modes
vllm_importance_sampling_clip_min | algorithm.rollout_correction.mis_low | the `*_mask` modes
off_policy_mask_threshold | - | {NOT_YET}
use_bias_correction_kl | - | {NOT_YET}: kitchen's KL loss is not weighted by the importance ratio (as TRL's `False`)
log_completions | rl.transcript_groups | groups per step whose transcripts go to the run directory
log_multimodal | - | {NOT_YET}
num_completions_to_print | - | transcripts go to the run directory (`rl.transcript_groups`), not the console
log_unique_prompts | - | transcripts are whole groups, one prompt each
log_completions_hub_repo | - | {HUB}
use_transformers_continuous_batching | local.sampler | kitchen's own sampler (`kitchen`) or `vllm`
transformers_continuous_batching_config | - | kitchen's own sampler or `vllm`
use_transformers_paged | - | kitchen's own sampler or `vllm`
vllm_importance_sampling_cap | algorithm.rollout_correction.tis_cap | TRL's deprecated name of
    `vllm_importance_sampling_clip_max`
""",
)

_KTO = _shared("KTOConfig", *_COMMON, "router_aux_loss_coef", "activation_offloading") + _rows(
    "KTOConfig",
    f"""
disable_dropout | - | {NO_DROPOUT}
max_length | data.max_length |
precompute_ref_log_probs | - | kitchen scores each step's batch with the frozen reference (the starting weights);
    precomputing over the whole data set is {NOT_YET}
precompute_ref_batch_size | - | see `precompute_ref_log_probs`
loss_type | kto.loss_type | `kto`; `apo_zero_unpaired` is {NOT_YET}; kitchen's `bco` is TRL's `BCOTrainer` (TRL 0.x)
    on the same data
beta | kto.beta |
desirable_weight | kto.desirable_weight |
undesirable_weight | kto.undesirable_weight |
sync_ref_model | - | {NOT_YET} for KTO (the `dpo` recipe has it)
ref_model_mixup_alpha | - | {NOT_YET} for KTO (the `dpo` recipe has it)
ref_model_sync_steps | - | {NOT_YET} for KTO (the `dpo` recipe has it)
""",
)

_REWARD = _shared("RewardConfig", *_COMMON, "activation_offloading") + _rows(
    "RewardConfig",
    f"""
chat_template_path | renderer | kitchen's chat template is a renderer, not a Jinja file
disable_dropout | - | {NO_DROPOUT}
eos_token | - | the renderer (or the tokenizer) ends each reply
max_length | data.max_length |
center_rewards_coefficient | reward_model.center_rewards_coefficient |
pad_token | - | the tokenizer's own; rows are unpadded
""",
)

# GKDConfig inherits SFTConfig: the SFT rows whose keys `gkd` lacks are overridden.
_GKD = _rows(
    "GKDConfig",
    f"""
per_device_train_batch_size | rl.groups_per_batch | prompts per step: one completion each from the data set or the
    teacher, `rl.group_size` from the student
num_train_epochs | - | GKD steps are counted in `rl.num_batches`
max_steps | rl.num_batches |
max_length | episode.max_context_tokens | a prompt longer than this ends its episode unsampled; replies stop at
    `sampling.max_tokens` (TRL cuts the sequence instead)
truncation_mode | - | see `max_length`
completion_only_loss | - | only completion positions are trained, as TRL's labels mask the prompt
loss_type | - | the generalized JSD replaces SFT's loss: see `beta`
dataset_text_field | - | a GKD task's groups carry their prompt and the data set's completion
    (`train_core.gkd.CompletionGroupBuilder`); the shipped recipe's are addition problems with their sums
chat_template_path | renderer | kitchen's chat template is a renderer, not a Jinja file
assistant_only_loss | - | only completion positions are trained
temperature | sampling.temperature | the student's (and with `seq_kd` the teacher's) sampling temperature, as in
    TRL; the divergence runs at temperature 1, as TRL's trainer calls it
lmbda | gkd.lmbda | drawn per batch from (`seed`, step), as TRL's `random() <= lmbda` per training step
beta | gkd.beta | TRL's generalized JSD, equal to `GKDTrainer.generalized_jsd_loss` (tests/distillation), taken
    over the teacher's top-`gkd.topk` tokens with both distributions renormalised there (the backends' ports
    carry a teacher's top-K logprobs, not its full-vocabulary logits)
max_new_tokens | sampling.max_tokens |
teacher_model_name_or_path | gkd.teacher.model_name gkd.teacher.checkpoint | a base model or kitchen sampler weights
teacher_model_init_kwargs | - | {NO_MODEL_KWARGS}
disable_dropout | - | {NO_DROPOUT}
seq_kd | gkd.seq_kd | the batches not on-policy train on the teacher's samples
""",
)

ROWS: tuple[Row, ...] = (*_TRAINING_ARGUMENTS, *_SFT, *_DPO, *_GRPO, *_KTO, *_REWARD, *_GKD)


def resolve(ancestry: tuple[str, ...], field: str) -> Row | None:
    """The row of `field` for a TRL config class whose ancestry (its MRO's class names, itself
    first) is `ancestry`: the nearest class's row, or None."""
    for trl_class in ancestry:
        for row in ROWS:
            if row.trl_class == trl_class and row.field == field:
                return row
    return None


def place(key: str, recipe: str) -> tuple[str, str]:
    """(recipe, dotted key) of a row's key: `recipe` unless the key names its own before a colon."""
    own, _, dotted = key.rpartition(":")
    return own or recipe, dotted
