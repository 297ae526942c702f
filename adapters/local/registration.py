"""The local backend's entry in kitchen's backend registry: its config section and factory.

Kept free of torch imports, so loading a config (or `kitchen validate`) stays cheap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kitchen.backends import BackendSpec
from kitchen.ports import ServiceBackend


class LocalSettings(BaseModel):
    """Config section `local`: where and how the in-process torch backend runs."""

    model_config = ConfigDict(extra="forbid")

    device: str | None = Field(None, description="torch device (cpu, cuda, cuda:1, mps); default cuda if available")
    cpu_threads: int | None = Field(
        None, ge=1, strict=True, description="torch CPU threads; default 1 for model_name tiny, else torch's default"
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str | None) -> str | None:
        if device is not None and not _DEVICE.fullmatch(device):
            raise ValueError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps")
        return device


_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")


def create(config: Any, settings: LocalSettings, checkpoint_dir: Path) -> ServiceBackend:
    import torch

    from adapters.local.backend import LocalBackend

    # The tiny model's matrices are too small to gain from intra-op threads, and spinning OpenMP
    # workers make it many times slower on a busy machine.
    threads = settings.cpu_threads or (1 if config.model_name == "tiny" else None)
    if threads is not None:
        torch.set_num_threads(threads)
    return LocalBackend(checkpoint_dir=checkpoint_dir, device=settings.device, seed=config.seed)


def export_hf(checkpoint: str, out_dir: Path, merge_lora: bool) -> dict[str, Any]:
    from adapters.local.export import export_hf as export

    return export(checkpoint, out_dir, merge_lora)


BACKEND = BackendSpec(
    name="local",
    description="torch + transformers in this process, on CPU or GPU (the embedded tiny model by default)",
    settings=LocalSettings,
    create=create,
    moved_keys={"device": "device", "cpu_threads": "cpu_threads"},
    export_hf=export_hf,
)
