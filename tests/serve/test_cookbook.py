"""tinker-cookbook's own recipes, unmodified, against `kitchen serve` (an optional stack:
`bash scripts/setup_cookbook.sh`).

The cookbook loads the tokenizer itself from `model_name`, so the model is named by a local
folder: kitchen's embedded tiny model (`adapters/common/tiny`), mapped to `tiny` in the server's
models file. Its renderer is given explicitly (`renderer_name=role_colon`: the cookbook picks one
from hub names only). Recipes that take no renderer, or default to one made for their default
model, run on the hub name they default to, which the models file maps to the tiny model (tiny-vl
for the vision recipe): serve writes its tokenizer, config and image processor into the HF cache
the recipe reads offline. The data are offline: small files in the formats the recipes read, and
hub datasets the recipes load by name laid out as `datasets` cache entries (`hub_dataset`).
`math_rl`'s default loss, `stable_reinforce`, needs sampling-time data only the Tinker service
records, so the runs name `importance_sampling` (kitchen serve refuses `stable_reinforce` with a
400 naming the losses it runs).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import pytest

from tests.eval.hf_offline import prepare
from tests.serve.server_process import API_KEY, ROOT, ServerProcess

COOKBOOK = importlib.util.find_spec("tinker_cookbook") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not COOKBOOK, reason="tinker-cookbook is not installed (bash scripts/setup_cookbook.sh)"),
]
TINY = ROOT / "adapters" / "common" / "tiny"
HUB_BASE = "Qwen/Qwen3.5-9B-Base"
"""`sl_loop`'s and `rl_loop`'s default model (they take no renderer_name; the cookbook recommends
role_colon for it), served as the tiny model."""
TEACHERS = ("Qwen/Qwen3.5-9B", "Qwen/Qwen3.6-27B")
"""The distillation recipes' default teachers (on-policy, and twenty_questions' answerer;
multi-teacher's DeepMath one), served as the tiny model too."""
PLAYER = "Qwen/Qwen3.5-4B"
"""twenty_questions' default player model (its answerer is TEACHERS[0], a second served name)."""
PROMPT_DISTILLED = "Qwen/Qwen3.6-35B-A3B"
"""prompt_distillation's default model."""
VISION = "Qwen/Qwen3.5-397B-A17B"
"""vlm_classifier's default model (a vision-language model), served as tiny-vl; multi-teacher's
Tulu 3 teacher by default too, which tiny-vl's language model serves as well (tiny-vl's tokenizer
is tiny's with the vision tokens appended, so the student's token ids mean the same to it)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("cookbook_serve")
    models = folder / "models.yaml"
    served = [f"{name}: tiny\n" for name in (TINY, HUB_BASE, *TEACHERS, PLAYER, PROMPT_DISTILLED)]
    models.write_text("".join([*served, f"{VISION}: tiny-vl\n"]), encoding="utf-8")
    process = ServerProcess(folder / "store", backend="local", extra=["--models", str(models)]).start()
    yield process
    process.stop()


def run_cookbook(
    module: str,
    server: ServerProcess,
    log_path: Path,
    *args: str,
    model: str = str(TINY),
    renderer: str | None = "role_colon",
    datasets_cache: Path | None = None,
    base_url_argument: bool = True,
    log_option: str = "log_path",
) -> list[dict[str, float]]:
    """`python -m tinker_cookbook.<module> ARGS` against the server, offline (the server's HF cache;
    `datasets_cache` for hub datasets); its metrics rows. `renderer=None` keeps the recipe's own;
    recipes without a `base_url` option find the server by the SDK's TINKER_BASE_URL; `log_option`
    names the recipe's log folder option (the metrics are found under it)."""
    env = {**os.environ, "TINKER_API_KEY": API_KEY, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env |= {"HF_HUB_CACHE": str(server.hf_cache), "TINKER_BASE_URL": server.url}
    if datasets_cache is not None:
        env["HF_DATASETS_CACHE"] = str(datasets_cache)
    command = [sys.executable, "-m", f"tinker_cookbook.{module}", f"model_name={model}", f"{log_option}={log_path}"]
    command += args
    if base_url_argument:
        command.append(f"base_url={server.url}")
    if renderer is not None:
        command += [f"renderer_name={renderer}", "behavior_if_log_dir_exists=delete"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (metrics,) = log_path.rglob("metrics.jsonl")
    lines = metrics.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def finite(rows: list[dict[str, float]], key: str) -> list[float]:
    """Every row's `key` (rows without it skipped), each checked finite."""
    values = [row[key] for row in rows if key in row]
    assert values and all(math.isfinite(value) for value in values), (key, rows[-1:])
    return values


def hub_dataset(
    root: Path,
    repo: str,
    splits: Mapping[str, Sequence[Mapping[str, object]]],
    config: str = "default",
    features: datasets.Features | None = None,
) -> Path:
    """`splits`' rows (typed by `features` where given) as hub dataset `repo` (parquet files in a
    snapshot) prepared into the `datasets` cache `root/datasets`, as a first online
    `load_dataset(repo, config)` leaves it; that cache."""
    snapshot = root / "hub" / ("datasets--" + repo.replace("/", "--")) / "snapshots" / ("0" * 40)
    (snapshot / config).mkdir(parents=True)
    card = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
    for split, rows in splits.items():
        parquet = snapshot / config / f"{split}-00000-of-00001.parquet"
        datasets.Dataset.from_list([dict(row) for row in rows], features=features).to_parquet(str(parquet))
        card += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (snapshot / "README.md").write_text("\n".join([*card, "---", ""]), encoding="utf-8")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(snapshot.name, encoding="utf-8")
    prepare(repo, config, root / "hub", root / "datasets")
    return root / "datasets"


def test_the_cookbooks_chat_sl_recipe_trains_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    import tinker_cookbook

    conversations = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    rows = run_cookbook(
        "recipes.chat_sl.train",
        server,
        tmp_path / "chat_sl",
        f"dataset={conversations}",
        "lora_rank=8",
        "batch_size=16",
        "max_length=256",
        "learning_rate=1e-3",
        "num_epochs=2",
    )
    nll = [row["train_mean_nll"] for row in rows if "train_mean_nll" in row]
    assert len(nll) >= 10
    assert sum(nll[-3:]) / 3 < sum(nll[:3]) / 3  # it learns, through the server


def test_the_cookbooks_math_rl_recipe_runs_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    rows = run_cookbook(
        "recipes.math_rl.train",
        server,
        tmp_path / "math_rl",
        "env=arithmetic",
        "loss_fn=importance_sampling",
        "lora_rank=8",
        "group_size=2",
        "groups_per_batch=4",
        "max_tokens=8",
        "learning_rate=1e-3",
        "eval_every=0",
        "save_every=50",
    )
    rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
    assert len(rewards) == 100  # the recipe's 100 batches of generated problems, every one trained
    assert all(key in rows[0] for key in ("optim/kl_sample_train_v1", "env/all/correct"))


def chats(count: int) -> list[dict[str, object]]:
    """`count` short user/assistant conversations in the hub's `messages` format (no_robots)."""
    return [
        {
            "prompt": f"Name a number after {i}.",
            "messages": [
                {"role": "user", "content": f"Name a number after {i}."},
                {"role": "assistant", "content": f"The number after {i} is {i + 1}."},
            ],
        }
        for i in range(count)
    ]


def test_the_cookbooks_sl_loop_trains_two_steps_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    cache = hub_dataset(tmp_path, "HuggingFaceH4/no_robots", {"train": chats(8), "test": chats(2)})
    rows = run_cookbook(
        "recipes.sl_loop",
        server,
        tmp_path / "sl_loop",
        "batch_size=4",
        "max_length=128",
        "lora_rank=8",
        "save_every=0",
        "ttl_seconds=None",
        model=HUB_BASE,
        renderer=None,
        datasets_cache=cache,
    )
    assert [row["step"] for row in rows if "train_mean_nll" in row] == [0, 1]
    assert all(nll > 0 for nll in finite(rows, "train_mean_nll"))


def test_the_cookbooks_rl_loop_runs_two_steps_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    problems = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(4)]
    cache = hub_dataset(tmp_path, "openai/gsm8k", {"train": problems, "test": problems[:1]}, config="main")
    rows = run_cookbook(
        "recipes.rl_loop",
        server,
        tmp_path / "rl_loop",
        "batch_size=2",
        "group_size=2",
        "max_tokens=8",
        "lora_rank=8",
        "loss_fn=importance_sampling",
        "save_every=0",
        "ttl_seconds=None",
        model=HUB_BASE,
        renderer=None,
        datasets_cache=cache,
    )
    assert [row["step"] for row in rows if "reward/total" in row] == [0, 1]
    assert all(0.0 <= reward <= 1.0 for reward in finite(rows, "reward/total"))


def test_the_cookbooks_sdft_recipe_runs_two_steps_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    rows = [{"prompt": chat["prompt"], "golden_response": [chat["messages"][1]["content"]]} for chat in chats(10)]  # type: ignore[index]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "toolalpaca"))
    metrics = run_cookbook(
        "recipes.sdft.train",
        server,
        tmp_path / "sdft",
        "dataset=toolalpaca",
        f"toolalpaca_data_path={tmp_path / 'toolalpaca'}",
        "lora_rank=8",
        "groups_per_batch=2",
        "max_tokens=8",
        "topk=4",
        "max_steps=2",
        "eval_every=0",
        "save_every=0",
    )
    # Top-K (forward KL) distillation: the teacher's top-4 prompt logprobs on every completion token
    # became [T, 4] cross-entropy targets, trained in each of the 2 steps.
    assert [row["step"] for row in metrics if "sdft/total_completion_tokens" in row] == [0, 1]
    assert finite(metrics, "sdft/num_datums") == [2.0, 2.0]
    assert all(0.0 <= entropy <= math.log(4) + 1e-6 for entropy in finite(metrics, "sdft/mean_teacher_entropy"))


def test_the_cookbooks_off_policy_reasoning_distillation_trains_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    traces = [
        {"conversations": [{"from": "human", "value": f"What is {i} + 1?"}, {"from": "gpt", "value": f"{i + 1}"}]}
        for i in range(4)
    ]
    cache = hub_dataset(tmp_path, "open-thoughts/OpenThoughts3-1.2M", {"train": traces})  # read streaming
    rows = run_cookbook(
        "recipes.distillation.off_policy_reasoning",
        server,
        tmp_path / "off_policy",
        "lora_rank=8",
        "batch_size=2",
        "max_length=128",
        "buffer_size=4",
        "max_prompts=4",
        "max_steps=2",
        "eval_every=0",
        "save_every=0",
        datasets_cache=cache,
    )
    assert [row["step"] for row in rows if "train_mean_nll" in row] == [0, 1]
    assert all(nll > 0 for nll in finite(rows, "train_mean_nll"))


def prompt_datasets(root: Path) -> Path:
    """DeepMath's and Tulu 3's prompts (the on-policy distillation datasets) in one `datasets` cache."""
    hub_dataset(root, "zwhe99/DeepMath-103K", {"train": [{"question": f"What is {i} + 1?"} for i in range(4)]})
    chat = [{"messages": chat["messages"]} for chat in chats(4)]
    return hub_dataset(root, "allenai/tulu-3-sft-mixture", {"train": chat})


def test_the_cookbooks_on_policy_distillation_runs_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    rows = run_cookbook(
        "recipes.distillation.on_policy_distillation",
        server,
        tmp_path / "on_policy",
        f"teacher_model={TEACHERS[0]}",
        "dataset=deepmath",
        "lora_rank=8",
        "group_size=2",
        "groups_per_batch=2",
        "max_tokens=8",
        "max_steps=2",
        "eval_every=0",
        "save_every=0",
        datasets_cache=prompt_datasets(tmp_path),
    )
    assert [row["step"] for row in rows if "teacher_kl" in row] == [0, 1]
    finite(rows, "teacher_kl")


def test_the_cookbooks_multi_teacher_distillation_runs_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    rows = run_cookbook(
        "recipes.distillation.on_policy_multi_teacher",
        server,
        tmp_path / "multi_teacher",
        f"deepmath_teacher_model={TEACHERS[1]}",
        f"tulu3_teacher_model={VISION}",
        "deepmath_groups_per_batch=1",
        "tulu3_groups_per_batch=1",
        "lora_rank=8",
        "group_size=2",
        "max_tokens=8",
        "max_steps=2",
        "eval_every=0",
        "save_every=0",
        datasets_cache=prompt_datasets(tmp_path),
    )
    assert [row["step"] for row in rows if "teacher_kl" in row] == [0, 1]
    for dataset in (0, 1):  # each teacher scored its own dataset's rollouts in both steps
        assert len(finite(rows, f"teacher_kl/dataset_{dataset}")) == 2


def test_the_cookbooks_prompt_distillation_trains_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    # The file `prompt_distillation.create_data` writes: each sentence with the teacher's label.
    labelled = [("The weather is nice today.", "en"), ("Il fait beau aujourd'hui.", "fr")] * 4
    data = tmp_path / "prompt_distillation_lang.jsonl"
    chat = [[{"role": "user", "content": text}, {"role": "assistant", "content": label}] for text, label in labelled]
    data.write_text("".join(json.dumps({"messages": messages}) + "\n" for messages in chat), encoding="utf-8")
    rows = run_cookbook(
        "recipes.prompt_distillation.train",
        server,
        tmp_path / "prompt_distillation",
        f"file_path={data}",
        "lora_rank=8",
        "batch_size=4",
        "max_length=128",
        "num_epochs=1",
        "eval_every=0",
        "save_every=0",
        model=PROMPT_DISTILLED,
        renderer=None,
    )
    assert [row["step"] for row in rows if "train_mean_nll" in row] == [0, 1]
    assert all(nll > 0 for nll in finite(rows, "train_mean_nll"))


def test_the_cookbooks_twenty_questions_runs_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    rows = run_cookbook(
        "recipes.multiplayer_rl.twenty_questions.train",
        server,
        tmp_path / "twenty_questions",
        "batch_size=2",
        "group_size=2",
        "max_tokens=8",
        "max_steps=2",
        "eval_every=0",
        "save_every=0",
        model=PLAYER,
        renderer=None,
        base_url_argument=False,  # the recipe has no base_url option: TINKER_BASE_URL
    )
    assert [row["step"] for row in rows if "env/all/reward/total" in row] == [0, 1]
    assert all(turns >= 1 for turns in finite(rows, "env/all/turns_per_episode"))


def photos(count: int) -> list[dict[str, object]]:
    """`count` small PNG photos, labelled by their colour (caltech101's image/label columns)."""
    import io

    from PIL import Image

    rows: list[dict[str, object]] = []
    for i in range(count):
        buffer = io.BytesIO()
        Image.new("RGB", (48, 32), ((255, 0, 0), (0, 0, 255))[i % 2]).save(buffer, format="PNG")
        rows.append({"image": {"bytes": buffer.getvalue(), "path": None}, "label": i % 2})
    return rows


def test_the_cookbooks_vlm_classifier_trains_two_steps_through_kitchen_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["red", "blue"])})
    splits = {"train": photos(4), "test": photos(2)}
    cache = hub_dataset(tmp_path, "dpdl-benchmark/caltech101", splits, features=features)
    rows = run_cookbook(
        "recipes.vlm_classifier.train",
        server,
        tmp_path / "vlm_classifier",
        "lora_rank=8",
        "batch_size=2",
        "num_epochs=1",
        "max_length=512",
        "eval_every=0",
        "save_every=0",
        "infrequent_eval_every=0",
        "run_sampling_evaluator=False",
        "behavior_if_log_dir_exists=delete",
        model=VISION,
        renderer=None,
        datasets_cache=cache,
        log_option="experiment_dir",
    )
    # Each step trained on 2 photos (image chunks through serve into tiny-vl's vision encoder).
    assert [row["step"] for row in rows if "train_mean_nll" in row] == [0, 1]
    assert all(nll > 0 for nll in finite(rows, "train_mean_nll"))
