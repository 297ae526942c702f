"""Served names in the Hugging Face cache, so that a program's `AutoTokenizer.from_pretrained(name)`
finds them offline.

The SDK's `SamplingClient.get_tokenizer()` (and tinker-cookbook's renderers) load the tokenizer
by model name alone, from the hub (the cookbook's VLM recipes its image processor too). For a name
the server serves that is not a local folder, the server writes the served model's tokenizer
files, config and image processor (`_KEPT`) into the HF cache of the machine it runs on
(`HF_HUB_CACHE`, default `~/.cache/huggingface/hub`) as a snapshot of that repo id, which
`HF_HUB_OFFLINE=1` programs on this machine then read. A name already in the cache is left
alone (the real hub files win), as are local folders and names that are not repo ids.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

log = logging.getLogger("kitchen.apps.serve")

_KEPT = ("config.json", "preprocessor_config.json")
"""The model's files published beside its tokenizer: its config, and a vision-language model's image
processor (`AutoImageProcessor.from_pretrained(name)`, which the cookbook's VLM recipes call)."""


def _repo_folder(cache: Path, name: str) -> Path:
    return cache / ("models--" + name.replace("/", "--"))


def cached(cache: Path, name: str) -> bool:
    """Whether the cache already holds files of repo `name` (its `main` snapshot)."""
    ref = _repo_folder(cache, name) / "refs" / "main"
    return ref.is_file() and (_repo_folder(cache, name) / "snapshots" / ref.read_text().strip()).is_dir()


def publish(cache: Path, name: str, tokenizer_dir: Path, config_dir: Path | None) -> bool:
    """Write `tokenizer_dir`'s files (and `config_dir`'s `_KEPT` files) as repo `name`'s `main`
    snapshot, unless the cache has it already; whether it wrote."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(name).is_dir() or cached(cache, name):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    files = {f.name: f for f in tokenizer_dir.iterdir() if f.is_file()}
    if config_dir is not None:
        files.update({n: config_dir / n for n in _KEPT if (config_dir / n).is_file()})
    digest = hashlib.sha1()
    for file_name in sorted(files):
        digest.update(file_name.encode() + files[file_name].read_bytes())
    folder = _repo_folder(cache, name)
    snapshot = folder / "snapshots" / digest.hexdigest()
    snapshot.mkdir(parents=True, exist_ok=True)
    for file_name, source in files.items():
        shutil.copyfile(source, snapshot / file_name)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(digest.hexdigest())
    log.info("serve.hf_cache name=%s snapshot=%s", name, snapshot)
    return True
