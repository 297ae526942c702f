"""The benchmark fixtures (`bench_fixtures/hub`, hub cache entries) as an offline Hugging Face
cache: a copy of the hub cache, and the `datasets` cache entries a first online
`load_dataset(REPO, CONFIG)` would have left, prepared by `datasets`' own builders from the
snapshot files. With the returned environment (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1) the
real loaders serve every benchmark by name without a network."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "bench_fixtures" / "hub"
DATASETS = {
    "openai/gsm8k": ("main",),
    "HuggingFaceH4/MATH-500": ("default",),
    "HuggingFaceH4/aime_2024": ("default",),
    "math-ai/aime25": ("default",),
    "Idavidrein/gpqa": ("gpqa_diamond",),
    "TIGER-Lab/MMLU-Pro": ("default",),
    "google/IFEval": ("default",),
    "evalplus/humanevalplus": ("default",),
    "evalplus/mbppplus": ("default",),
}
"""The repos read with `datasets.load_dataset`, and their configs (the rest are read as files)."""


def snapshot(repo: str, hub: Path = FIXTURES) -> Path:
    entry = hub / ("datasets--" + repo.replace("/", "--"))
    return entry / "snapshots" / (entry / "refs" / "main").read_text().strip()


def prepare(repo: str, config: str, hub: Path, cache: Path) -> None:
    """The `datasets` cache entry under `cache` of `repo`/`config`, built from its snapshot in `hub`."""
    from datasets.load import dataset_module_factory, get_dataset_builder_class
    from datasets.naming import camelcase_to_snakecase

    folder = snapshot(repo, hub)
    name = camelcase_to_snakecase(repo.split("/")[1])
    module = dataset_module_factory(str(folder))
    kwargs = {**module.builder_kwargs, "dataset_name": name, "hash": folder.name}
    builder = get_dataset_builder_class(module, dataset_name=name)(cache_dir=str(cache), config_name=config, **kwargs)
    builder.download_and_prepare()
    target = cache / repo.replace("/", "___").replace(repo.split("/")[1], name)
    target.mkdir(parents=True, exist_ok=True)
    for config_dir in (cache / name).iterdir():
        shutil.copytree(config_dir, target / config_dir.name, dirs_exist_ok=True)
    shutil.rmtree(cache / name)


def offline_hf(root: Path) -> dict[str, str]:
    """Lay the fixtures out under `root` as an offline cache; the environment that uses it."""
    hub, cache = root / "hub", root / "datasets"
    shutil.copytree(FIXTURES, hub)
    for repo, configs in DATASETS.items():
        for config in configs:
            prepare(repo, config, hub, cache)
    return {
        "HF_HUB_CACHE": str(hub),
        "HF_DATASETS_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
