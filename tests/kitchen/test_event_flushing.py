"""Buffered events still reach events.jsonl when a run fails or is killed with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from kitchen.engine.context import Context
from kitchen.engine.observe.logging import make_run_logger
from kitchen.engine.runner import Runner, StageFailure
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Workflow

ROOT = Path(__file__).resolve().parents[2]


class Cfg(BaseModel):
    pass


class Chatty(Stage):
    async def run(self, ctx: Context) -> None:
        ctx.log.debug("chatty.debug", step=ctx.step)


class Boom(Stage):
    async def run(self, ctx: Context) -> None:
        raise RuntimeError("kaboom")


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_events_before_an_exception_are_on_disk_before_the_sink_closes(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    logger, sink = make_run_logger(events)
    workflow = Workflow(
        "w", steps=[Loop("train", over=lambda ctx: 3, step=True, body=[Chatty(), Chatty(name="c2")]), Boom()]
    )
    with pytest.raises(StageFailure):
        asyncio.run(Runner(workflow).run(Context(Cfg(), {}, logger=logger)))
    names = [e["event"] for e in _events(events)]  # read before close: nothing relies on it
    assert names.count("chatty.debug") == 6
    assert names.count("stage.end") == 0  # inside step loops a stage's time is a metric, not an event
    assert _events(events)[0]["stages"] == ["chatty", "c2", "boom"]
    assert names[-1] == "run.failed"
    sink.close()


def test_events_between_step_ends_are_buffered_and_flushed_at_the_step_end(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    logger, sink = make_run_logger(events)
    seen: list[int] = []

    class Look(Stage):
        async def run(self, ctx: Context) -> None:
            seen.append(len(events.read_text(encoding="utf-8").splitlines()))

    workflow = Workflow("w", steps=[Loop("train", over=lambda ctx: 2, step=True, body=[Chatty(), Look()])])
    asyncio.run(Runner(workflow).run(Context(Cfg(), {}, logger=logger)))
    sink.close()
    # At step 1 the file holds step 0's events (flushed at its end), not yet step 1's debug event.
    lines = _events(events)
    assert seen == [0, 2]  # run.start and step 0's chatty.debug
    assert [e["event"] for e in lines].count("chatty.debug") == 2


def test_sigterm_flushes_buffered_events_then_kills_the_process(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        from pathlib import Path
        from pydantic import BaseModel
        from kitchen.engine.context import Context
        from kitchen.engine.observe.logging import handle_sigterm, make_run_logger
        from kitchen.engine.runner import Runner
        from kitchen.engine.stage import Stage
        from kitchen.engine.workflow import Workflow

        class Cfg(BaseModel):
            pass

        class Killed(Stage):
            async def run(self, ctx):
                for i in range(5):
                    ctx.log.debug("before.kill", i=i)
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(30)

        logger, sink = make_run_logger(Path({str(events)!r}))
        with handle_sigterm():
            asyncio.run(Runner(Workflow("w", steps=[Killed()])).run(Context(Cfg(), {{}}, logger=logger)))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60, capture_output=True, text=True)
    assert result.returncode == -signal.SIGTERM, result.stderr
    names = [e["event"] for e in _events(events)]
    assert names == ["run.start"] + ["before.kill"] * 5
