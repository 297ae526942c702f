from __future__ import annotations

from pathlib import Path
from typing import Any

from kitchen.checkpoints import CheckpointRecord, append_record
from kitchen.context import Context
from kitchen.rundir import record_files
from kitchen.stage import Stage


def checkpoint_files(service: Any, *paths: str | None) -> list[Path]:
    """The files on this machine behind saved checkpoint paths, when the backend can tell
    (`checkpoint_files`); remote checkpoints have none."""
    list_files = getattr(service, "checkpoint_files", None)
    if list_files is None:
        return []
    return [file for path in paths if path for file in list_files(path)]


class SaveCheckpoint(Stage):
    """Save weights + optimizer state and sampler weights, then record them in checkpoints.jsonl.

    Inside a step loop the record is appended when the step ends, after its metrics row is
    written, so a resumed run never misses a logged step. Outside (the final save) it is
    appended at once. Await pending training results before this stage.
    """

    reads = ("training_client",)
    ports = ("service",)
    calls = ("TrainingClient.save_state", "TrainingClient.save_weights_for_sampler")

    def __init__(self, final: bool = False, name: str | None = None) -> None:
        super().__init__(name or ("save_final_checkpoint" if final else "save_checkpoint"))
        self.final = final

    async def run(self, ctx: Context) -> None:
        client = ctx["training_client"]
        completed = ctx.step if self.final else ctx.step + 1
        name = "final" if self.final else f"{completed:06d}"
        state_path = await (await client.save_state(name))
        sampler_path = await (await client.save_weights_for_sampler(name))
        if ctx.run_dir is None:
            return
        files = checkpoint_files(ctx.port("service"), state_path, sampler_path)
        record = CheckpointRecord(
            name=name,
            step=completed,
            loops=ctx.last_step_loops if self.final else ctx.loop_positions(),
            state={key: ctx.state[key] for key in ctx.persist_keys if key in ctx.state},
            state_path=state_path,
            sampler_path=sampler_path,
            fingerprint=ctx.fingerprint,
            files=record_files(files, ctx.run_dir),
            final=self.final,
        )
        path = ctx.run_dir / "checkpoints.jsonl"
        if self.final:
            append_record(path, record)
        else:
            ctx.at_step_end(lambda: append_record(path, record))
        ctx.log.info("checkpoint.saved", name=name, step=completed, state_path=state_path)
