from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import Field

from kitchen.engine.config.eval_schedule import EvalSchedule
from kitchen.engine.config.run import NonNegative
from kitchen.engine.config.sections import RESUME_SAFE, Section
from kitchen.engine.context import Context
from kitchen.engine.ports import ServiceBackend, TrainingClient
from kitchen.engine.runs.best_checkpoint import refresh_best
from kitchen.engine.runs.checkpoints import CheckpointRecord, append_record, read_records
from kitchen.engine.runs.rundir import record_files
from kitchen.engine.stage import Stage


class CheckpointSettings(Section):
    """Config section `checkpoint`: how often the run saves, and which step checkpoints stay on disk."""

    save_every: NonNegative = Field(
        20, description="checkpoint every N steps; 0 = only the final one", json_schema_extra=RESUME_SAFE
    )
    keep_last: int | None = Field(
        5,
        ge=1,
        description="keep only the newest N step checkpoints on disk, plus 'final', the one with the best "
        "held-out metric and the one a resume needs; null: keep all",
    )
    keep_every: int | None = Field(
        None, ge=1, description="with keep_last: also keep the checkpoints of steps that are multiples of N"
    )


def checkpoint_files(service: Any, *paths: str | None) -> list[Path]:
    """The files on this machine behind saved checkpoint paths, when the backend can tell
    (`checkpoint_files`); remote checkpoints have none."""
    list_files = getattr(service, "checkpoint_files", None)
    if list_files is None:
        return []
    return [file for path in paths if path for file in list_files(path)]


class SaveCheckpoint(Stage):
    """Save weights + optimizer state and sampler weights, then record them in checkpoints.jsonl.

    Inside a step loop the record is appended after the step's metrics row is written (which
    waits for the step's background evaluations), so a resumed run never misses a logged step and
    the best checkpoint is chosen knowing the step's evaluations. Outside (the final save) it is
    appended at once. Await pending training results before this stage.

    With `checkpoint.keep_last` (default 5), older step checkpoints are deleted from disk once the new record
    is written (their records stay in checkpoints.jsonl, as history): the newest `keep_last` are
    kept, and those whose step is a multiple of `keep_every`, and `final`, the best evaluated one
    (`kitchen.engine.runs.best_checkpoint`), and always the newest one (the one a resume starts from). Only
    directories inside the run directory are ever deleted (a remote backend's checkpoints are left
    alone). With `eval.best_checkpoint` set, the pointer `best_checkpoint.json` is refreshed first.
    """

    calls = (TrainingClient.save_state, TrainingClient.save_weights_for_sampler)

    def __init__(self, final: bool = False, name: str | None = None) -> None:
        super().__init__(name or ("save_final_checkpoint" if final else "save_checkpoint"))
        self.final = final

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        service: ServiceBackend,
        checkpoint: CheckpointSettings,
        evals: EvalSchedule,
    ) -> None:
        client = training_client
        completed = ctx.step if self.final else ctx.step + 1
        name = "final" if self.final else f"{completed:06d}"
        state_path = await (await client.save_state(name))
        sampler_path = await (await client.save_weights_for_sampler(name))
        if ctx.run_dir is None:
            return
        files = checkpoint_files(service, state_path, sampler_path)
        record = CheckpointRecord(
            name=name,
            step=completed,
            loops=ctx.last_step_loops if self.final else ctx.loop_positions(),
            state=ctx.persisted_state(),
            state_path=state_path,
            sampler_path=sampler_path,
            fingerprint=ctx.fingerprint,
            files=record_files(files, ctx.run_dir),
            final=self.final,
        )
        path = ctx.run_dir / "checkpoints.jsonl"
        keep_last, keep_every = checkpoint.keep_last, checkpoint.keep_every
        run_dir = ctx.run_dir

        def commit() -> None:
            append_record(path, record)
            best = refresh_best(run_dir, evals.best_checkpoint)
            if keep_last is not None:
                protect = {best} if best is not None else set()
                for old in prune_checkpoints(path, run_dir, keep_last, keep_every, protect):
                    ctx.log.info("checkpoint.deleted", name=old.name, step=old.step)

        if self.final:
            commit()
        else:
            ctx.at_step_end(commit)
        ctx.log.info("checkpoint.saved", name=name, step=completed, state_path=state_path)


def checkpoints_to_delete(
    records: list[CheckpointRecord], keep_last: int, keep_every: int | None, protect: Collection[str] = ()
) -> list[CheckpointRecord]:
    """The step checkpoints `keep_last` / `keep_every` let go, oldest first; never `final`, those
    named in `protect` (the best one) nor the newest record (a resume
    starts from it). A name saved twice (a rerun) counts once, as its newest record."""
    newest: dict[str, CheckpointRecord] = {}
    for record in records:
        newest.pop(record.name, None)
        newest[record.name] = record  # re-inserted: dict order is save order
    steps = [r for r in newest.values() if r.name != "final" and r.state_path]
    keep = {r.name for r in steps[-keep_last:]}
    if keep_every is not None:
        keep |= {r.name for r in steps if r.step % keep_every == 0}
    if records:
        keep.add(records[-1].name)
    keep |= set(protect)
    return [r for r in steps if r.name not in keep]


def prune_checkpoints(
    path: Path, run_dir: Path, keep_last: int, keep_every: int | None, protect: Collection[str] = ()
) -> list[CheckpointRecord]:
    """Delete the files or directories of the checkpoints `checkpoints_to_delete` names (those
    inside `run_dir` only); return the records whose files were deleted."""
    deleted = []
    root = run_dir.resolve()
    for record in checkpoints_to_delete(read_records(path), keep_last, keep_every, protect):
        removed = False
        for saved in (record.state_path, record.sampler_path):
            if saved is None or "://" in saved:
                continue
            target = Path(saved).resolve()
            if not target.is_relative_to(root) or target == root:
                continue
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
                removed = True
            elif target.is_file():
                target.unlink()
                removed = True
        if removed:
            deleted.append(record)
    return deleted
