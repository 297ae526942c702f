"""The Tinker API's REST side on a `TinkerService`: what `RestClient`, `AdminClient` and the
`tinker` CLI ask about sessions, training runs and checkpoints, and change about them.

Listing and reading (capabilities, runs, checkpoints, sessions and their search), a checkpoint's
life (publish to every key and back, TTL, copies that share its files, deletion), downloads
(exported weights and session traces as signed links, `kitchen.apps.serve.signing`), and the
admin reports, which on one machine are what the store holds: its checkpoint storage, an empty
billing report (nothing is billed) and an audit log of the checkpoint events it recorded.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from pathlib import Path
from typing import Any

from tinker import types as sdk

from kitchen.apps.serve.errors import Conflict, NotFound, ServeError
from kitchen.apps.serve.records import TINKER_SCHEME, CheckpointRecord, RunRecord, SessionRecord, tinker_path
from kitchen.apps.serve.service import TinkerService
from kitchen.apps.serve.signing import DOWNLOAD_AUDIENCE, ServerSecret

LINK_LIFETIME_S = 3600.0
"""How long a download link works (the SDK re-signs before it lapses)."""
SESSION_PAGE_MAX = 1000


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


class TinkerRest:
    """The REST endpoints, over the service's records; `secret` signs download links."""

    def __init__(self, service: TinkerService, secret: ServerSecret) -> None:
        self.service = service
        self.store = service.store
        self.secret = secret

    # --- capabilities and training runs ---

    def capabilities(self) -> dict[str, Any]:
        names = sorted(self.service.catalog.models)
        models = [sdk.SupportedModel(model_name=name, trainable=True, sampleable=True) for name in names]
        return sdk.GetServerCapabilitiesResponse(supported_models=models).model_dump(mode="json", exclude_none=True)

    def checkpoint_json(self, record: CheckpointRecord) -> dict[str, Any]:
        return sdk.Checkpoint(
            checkpoint_id=record.checkpoint_id,
            checkpoint_type=record.checkpoint_type,
            time=_utc(record.time),
            tinker_path=record.tinker_path,
            size_bytes=_size(Path(record.backend_path)),
            public=record.public,
            user_metadata=record.user_metadata,
            expires_at=None if record.expires_at is None else _utc(record.expires_at),
        ).model_dump(mode="json", exclude_none=True)

    def _run_json(self, run: RunRecord) -> dict[str, Any]:
        checkpoints = self.store.checkpoints_of(run.owner, run.training_run_id)
        last = {kind: [c for c in checkpoints if c.checkpoint_type == kind] for kind in ("training", "sampler")}
        return {
            "training_run_id": run.training_run_id,
            "base_model": run.base_model,
            "model_owner": run.owner,
            "is_lora": run.lora_rank is not None,
            "lora_rank": run.lora_rank,
            "last_request_time": run.last_request_time,
            "last_checkpoint": self.checkpoint_json(last["training"][-1]) if last["training"] else None,
            "last_sampler_checkpoint": self.checkpoint_json(last["sampler"][-1]) if last["sampler"] else None,
            "user_metadata": run.user_metadata,
        }

    def run(self, owner: str, training_run_id: str, *, accessible: bool = False) -> RunRecord:
        """A training run of `owner`'s (with `accessible`, also one with a published checkpoint)."""
        run = self.store.data.runs.get(training_run_id)
        visible = run is not None and (run.owner == owner or (accessible and self._published(run)))
        if run is None or not visible:
            raise NotFound(f"unknown training run {training_run_id!r}")
        return run

    def _published(self, run: RunRecord) -> bool:
        return any(c.public for c in self.store.data.checkpoints.values() if c.training_run_id == run.training_run_id)

    def get_training_run(self, owner: str, training_run_id: str, access_scope: str = "owned") -> dict[str, Any]:
        return self._run_json(self.run(owner, training_run_id, accessible=access_scope == "accessible"))

    def list_training_runs(
        self, owner: str, limit: int, offset: int, access_scope: str = "owned", project_id: str | None = None
    ) -> dict[str, Any]:
        accessible = access_scope == "accessible"
        runs = [
            r
            for r in self.store.data.runs.values()
            if (r.owner == owner or (accessible and self._published(r)))
            and (project_id is None or self._project_of(r.session_id) == project_id)
        ]
        runs.sort(key=lambda r: r.created)
        return {
            "training_runs": [self._run_json(r) for r in runs[offset : offset + limit]],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)},
        }

    def _project_of(self, session_id: str) -> str | None:
        session = self.store.data.sessions.get(session_id)
        return None if session is None else session.project_id

    # --- checkpoints ---

    def list_checkpoints(
        self, owner: str, training_run_id: str | None, limit: int = 1000, offset: int = 0
    ) -> dict[str, Any]:
        self.service.sweep_expired()
        if training_run_id is not None:
            self.run(owner, training_run_id)
        found = sorted(
            self.store.checkpoints_of(owner, training_run_id), key=lambda c: c.time, reverse=training_run_id is None
        )
        return {
            "checkpoints": [self.checkpoint_json(c) for c in found[offset : offset + limit]],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(found)},
        }

    def _own(self, owner: str, training_run_id: str, checkpoint_id: str) -> CheckpointRecord:
        return self.service.checkpoint(owner, f"{TINKER_SCHEME}{training_run_id}/{checkpoint_id}")

    def delete_checkpoint(self, owner: str, training_run_id: str, checkpoint_id: str) -> None:
        record = self._own(owner, training_run_id, checkpoint_id)
        self.service._drop_checkpoint(record)
        self.store.log_event("checkpoint_delete", owner, record.tinker_path)

    def publish(self, owner: str, training_run_id: str, checkpoint_id: str, public: bool) -> None:
        """Make a checkpoint loadable and sampleable by every key (or only its owner's again)."""
        record = self._own(owner, training_run_id, checkpoint_id)
        if record.public == public:
            raise Conflict(f"{record.tinker_path} is already {'public' if public else 'private'}")
        record.public = public
        self.store.save()
        self.store.log_event("checkpoint_publish" if public else "checkpoint_unpublish", owner, record.tinker_path)

    def set_ttl(self, owner: str, training_run_id: str, checkpoint_id: str, ttl_seconds: int | None) -> None:
        record = self._own(owner, training_run_id, checkpoint_id)
        record.expires_at = self.service.expiry(ttl_seconds)
        self.store.save()
        self.store.log_event("checkpoint_set_ttl", owner, record.tinker_path, ttl_seconds=ttl_seconds)

    def weights_info(self, owner: str, path: str, token_owner: str | None = None) -> dict[str, Any]:
        record = self.service.checkpoint(owner, path, read=True, token_owner=token_owner)
        run = self.store.data.runs[record.training_run_id]
        info = sdk.WeightsInfoResponse(
            base_model=run.base_model, is_lora=run.lora_rank is not None, lora_rank=run.lora_rank
        )
        if run.layers is not None:
            info = info.model_copy(update=run.layers)
        return info.model_dump(mode="json", exclude_none=True)

    def copy_weights(
        self, owner: str, request: sdk.CopyWeightsRequest, token_owner: str | None, idempotency_key: str | None
    ) -> dict[str, Any]:
        """A copy of a checkpoint in a new training run (and, without a session, a new session in
        the destination project); the copy shares the source's files and cannot be trained."""
        key = None if idempotency_key is None else f"{owner}:{idempotency_key}"
        if key is not None and key in self.store.data.copies:
            return sdk.CopyWeightsResponse(tinker_path=self.store.data.copies[key]).model_dump(mode="json")
        source = self.service.checkpoint(owner, request.source_path, read=True, token_owner=token_owner)
        expires_at = self.service.expiry(request.ttl_seconds)
        if request.session_id is not None:
            session = self.service.session(owner, request.session_id)
            if request.model_seq_id is None:
                raise ServeError("copy_weights: a session_id comes with its model_seq_id")
            run_id = f"{session.session_id}:train:{request.model_seq_id}"
        elif request.destination_project_id:
            session = SessionRecord(
                f"s{secrets.token_hex(8)}", owner, time.time(), project_id=request.destination_project_id
            )
            session.finished = "success"
            self.store.add_session(session)
            run_id = f"{session.session_id}:train:0"
        else:
            raise ServeError("copy_weights: give a destination_project_id, or a session_id and model_seq_id")
        if run_id in self.store.data.runs:
            raise Conflict(f"training run {run_id!r} already exists")
        source_run = self.store.data.runs[source.training_run_id]
        now = time.time()
        run = RunRecord(run_id, owner, session.session_id, source_run.base_model, source_run.lora_rank, now, now)
        run.layers, run.copy_of = source_run.layers, source.tinker_path
        self.store.add_run(run)
        path = tinker_path(run_id, source.checkpoint_type, source.name)
        copy = CheckpointRecord(
            path,
            run_id,
            source.checkpoint_type,
            source.name,
            source.backend_path,
            owner,
            now,
            source.user_metadata,
            False,
            expires_at,
        )
        self.store.add_checkpoint(copy)
        if key is not None:
            self.store.data.copies[key] = path
            self.store.save()
        self.store.log_event("checkpoint_copy", owner, path, source=source.tinker_path)
        return sdk.CopyWeightsResponse(tinker_path=path).model_dump(mode="json")

    # --- downloads ---

    def link(self, base_url: str, file: Path) -> str:
        """A signed link to a file in the store (no credentials needed to fetch it)."""
        relative = file.resolve().relative_to(self.store.folder.resolve()).as_posix()
        token = self.secret.mint({"file": relative}, DOWNLOAD_AUDIENCE, LINK_LIFETIME_S)
        return f"{base_url.rstrip('/')}/api/v1/download/{token}"

    def linked_file(self, token: str) -> Path:
        """The store file a link names; a forged, expired or stale link is a 404."""
        claims = self.secret.read(token, DOWNLOAD_AUDIENCE)
        if claims is None or not isinstance(claims.get("file"), str):
            raise NotFound("this download link is invalid or expired; ask for a new one")
        root = self.store.folder.resolve()
        file = (root / claims["file"]).resolve()
        if not file.is_relative_to(root) or not file.is_file():
            raise NotFound("the file behind this download link is gone (its checkpoint was deleted or expired)")
        return file

    def external_weights_urls(
        self, owner: str, training_run_id: str, checkpoint_id: str, base_url: str
    ) -> dict[str, Any]:
        record = self.service.checkpoint(
            owner, f"{TINKER_SCHEME}{training_run_id}/{checkpoint_id}", "external", read=True
        )
        folder = Path(record.backend_path)
        files = sorted(f for f in folder.rglob("*") if f.is_file())
        urls = {f.relative_to(folder).as_posix(): self.link(base_url, f) for f in files}
        expires = _utc(time.time() + LINK_LIFETIME_S)
        return sdk.ExternalWeightsUrlsResponse(urls=urls, expires=expires).model_dump(mode="json")

    # --- sessions ---

    def get_session(self, owner: str, session_id: str) -> dict[str, Any]:
        record = self.service.session(owner, session_id, live=False)
        runs = [r.training_run_id for r in self.store.data.runs.values() if r.session_id == session_id]
        samplers = [s for s, live in self.service.samplers.items() if live.session_id == session_id]
        return sdk.GetSessionResponse(
            training_run_ids=runs,
            sampler_ids=samplers,
            user_metadata=record.user_metadata,
            display_name=record.display_name,
        ).model_dump(mode="json")

    def _sessions(self, owner: str) -> list[SessionRecord]:
        """`owner`'s sessions, newest first."""
        found = [s for s in self.store.data.sessions.values() if s.owner == owner]
        return sorted(found, key=lambda s: (s.created, s.session_id), reverse=True)

    def list_sessions(self, owner: str, limit: int, offset: int) -> dict[str, Any]:
        page = self._sessions(owner)[offset : offset + min(limit, SESSION_PAGE_MAX)]
        return {"sessions": [s.session_id for s in page]}

    def assign_project(self, owner: str, session_id: str, project_id: str | None) -> None:
        if not project_id:
            raise ServeError("assign_session_project: give a project_id (sessions cannot leave a project)")
        record = self.service.session(owner, session_id, live=False)
        record.project_id = project_id
        self.store.save()

    def _status(self, session: SessionRecord) -> dict[str, Any]:
        if session.finished is None:
            return {"type": "active"}
        return {"type": "client_finished", "reason": {"type": session.finished}}

    def _summary(self, session: SessionRecord) -> dict[str, Any]:
        checkpoints = [
            c
            for c in self.store.data.checkpoints.values()
            if self.store.data.runs.get(c.training_run_id, None) is not None
            and self.store.data.runs[c.training_run_id].session_id == session.session_id
        ]
        return sdk.SessionSummary.model_validate(
            {
                "session_id": session.session_id,
                "created_at": _utc(session.created),
                "owner": f"tml:user:{session.owner}",
                "project_id": session.project_id,
                "status": self._status(session),
                "checkpoints_count": len(checkpoints),
                "display_name": session.display_name,
                "user_metadata": session.user_metadata,
                "checkpoint_storage_bytes": sum(_size(Path(c.backend_path)) or 0 for c in checkpoints),
            }
        ).model_dump(mode="json")

    def search_sessions(self, owner: str, request: sdk.SessionSearchRequest) -> dict[str, Any]:
        """A page of sessions matching the search, newest first (own sessions: a key sees no other's)."""
        owner_type = request.owner.type
        if owner_type == "user" and f"tml:user:{owner}" not in getattr(request.owner, "owner_urns", []):
            return sdk.SessionSearchResponse(sessions=[]).model_dump(mode="json")
        found = [s for s in self._sessions(owner) if _matches(s, request)]
        if request.cursor is not None:
            after = (request.cursor.last_created_at.timestamp(), request.cursor.last_session_id)
            found = [s for s in found if (s.created, s.session_id) < after]
        page = found[: request.limit]
        cursor = None
        if len(found) > request.limit:
            last = page[-1]
            cursor = {"last_created_at": _utc(last.created), "last_session_id": last.session_id}
        body = {"sessions": [self._summary(s) for s in page], "next_cursor": cursor}
        return sdk.SessionSearchResponse.model_validate(body).model_dump(mode="json")

    def export_trace(self, owner: str, session_id: str, base_url: str) -> dict[str, Any]:
        self.service.session(owner, session_id, live=False)
        path = self.service.traces.export(session_id)
        return {"status": "ready", "url": self.link(base_url, path)}

    # --- admin reports ---

    def storage_usage(self, owner: str, project_id: str | None) -> dict[str, Any]:
        self.service.sweep_expired()
        by_project: dict[str | None, list[CheckpointRecord]] = {}
        for record in self.store.checkpoints_of(owner):
            run = self.store.data.runs.get(record.training_run_id)
            project = None if run is None else self._project_of(run.session_id)
            if project_id is None or project == project_id:
                by_project.setdefault(project, []).append(record)
        items = []
        for project, records in sorted(by_project.items(), key=lambda kv: str(kv[0])):
            size = sum(_size(Path(c.backend_path)) or 0 for c in records)
            items.append(
                {
                    "project_id": project,
                    "org_user_urn": f"tml:user:{owner}",
                    "checkpoint_count": len(records),
                    "size_bytes": size,
                    "size_gigabytes": size / 1e9,
                }
            )
        return sdk.CurrentCheckpointStorageUsageResponse.model_validate({"data": items}).model_dump(mode="json")

    def billing_usage(self, starting_on: str, ending_before: str) -> dict[str, Any]:
        """Nothing is billed on a kitchen server: a well-formed report with no events."""
        sdk.GetBillingUsageRequest.model_validate({"starting_on": starting_on, "ending_before": ending_before})
        return sdk.BillingUsageResponse(data=[]).model_dump(mode="json")

    def audit_log(self, owner: str, event_type: str, day: str | None) -> dict[str, Any]:
        """The checkpoint events this key caused on `day` (UTC; default today): creation, deletion,
        publishing, TTL changes and copies. Projects, teams and organizations have none here."""
        if event_type not in ("all", "checkpoints", "projects", "teams", "organizations"):
            raise ServeError(f"audit log: unknown event_type {event_type!r}")
        date = dt.date.fromisoformat(day) if day else dt.datetime.now(dt.UTC).date()
        entries = [
            {
                "timestamp": _utc(e["time"]),
                "event": e["event"],
                "event_details": {k: v for k, v in e.items() if k not in ("time", "event", "owner")},
                "tinker_path": e.get("tinker_path"),
            }
            for e in self.store.data.events
            if e["owner"] == owner and _utc(e["time"]).date() == date and event_type in ("all", "checkpoints")
        ]
        return sdk.AuditLogResponse.model_validate({"entries": entries}).model_dump(mode="json")


def _size(path: Path) -> int | None:
    """Bytes on disk of a checkpoint's files (None where the backend keeps none)."""
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return None


def _matches(session: SessionRecord, request: sdk.SessionSearchRequest) -> bool:
    if request.project_ids is not None and session.project_id not in request.project_ids:
        return False
    metadata = session.user_metadata or {}
    if any(metadata.get(k) != v for k, v in request.user_metadata.items()):
        return False
    if request.statuses is not None:
        status = "active" if session.finished is None else "client_finished"
        if not any(
            q.type == status
            and (q.type != "client_finished" or session.finished in (getattr(q, "reasons", None) or [session.finished]))
            for q in request.statuses
        ):
            return False
    if request.session_id is None and request.display_name is None:
        return True
    by_id = request.session_id is not None and session.session_id == request.session_id
    name = (session.display_name or "").lower()
    by_name = request.display_name is not None and all(w in name for w in request.display_name.lower().split())
    return by_id or by_name
