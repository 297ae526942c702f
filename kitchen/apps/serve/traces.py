"""Each session's timeline: one span per request the server ran for it, exported on request as a
trace file that Perfetto (ui.perfetto.dev) and chrome://tracing open.

A span is what the server saw of one request: its kind (`forward_backward`, `sample`, ...), the
training run or sampler it was for, when it was submitted and when its result was ready, and
whether it failed. The spans live in memory (a restart starts a fresh timeline) and, exported,
in `<store>/traces/<session>.json` as Chrome trace-event JSON: one complete ("X") event per
span, a track per training run or sampler.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

MAX_SPANS = 100_000
"""Spans kept per session (the oldest are dropped past it), so a long session cannot grow without bound."""


@dataclass(frozen=True)
class Span:
    name: str
    track: str
    start: float
    end: float
    error: str | None = None


class SessionTraces:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._spans: dict[str, list[Span]] = defaultdict(list)
        self._lock = threading.Lock()

    def record(self, session_id: str, span: Span) -> None:
        with self._lock:
            spans = self._spans[session_id]
            spans.append(span)
            if len(spans) > MAX_SPANS:
                del spans[: len(spans) - MAX_SPANS]

    def spans(self, session_id: str) -> list[Span]:
        with self._lock:
            return list(self._spans.get(session_id, ()))

    def export(self, session_id: str) -> Path:
        """Write the session's trace file (rewritten on each export) and return its path."""
        spans = self.spans(session_id)
        tracks = {track: index for index, track in enumerate(dict.fromkeys(s.track for s in spans), 1)}
        events: list[dict[str, object]] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": track}}
            for track, tid in tracks.items()
        ]
        for span in spans:
            args: dict[str, object] = {"track": span.track}
            if span.error is not None:
                args["error"] = span.error
            events.append(
                {
                    "ph": "X",
                    "name": span.name,
                    "pid": 1,
                    "tid": tracks[span.track],
                    "ts": round(span.start * 1e6),
                    "dur": max(0, round((span.end - span.start) * 1e6)),
                    "args": args,
                }
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{session_id}.json"
        temp = path.with_suffix(".json.tmp")
        temp.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}), encoding="utf-8")
        temp.replace(path)
        return path
