"""What every route of the server shares: a JSON body read as a request model (or refused with
`WireError`, HTTP 400), the caller's key from either header, and a refusal in OpenAI's error shape.
Light on purpose: the agents' OpenAI endpoint (`kitchen.integrations.agents`) uses it without
importing the Tinker wire format, and with it torch."""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class WireError(ValueError):
    """A request body that is not a valid request (answered with HTTP 400)."""


def parse(model: type[M], body: bytes) -> M:
    """A JSON request body as `model`; anything else is a WireError naming the problem."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5])
        raise WireError(f"{model.__name__}: {problems}") from None


def bearer_or_header(request: Request) -> str | None:
    """The caller's key: OpenAI's `Authorization: Bearer KEY`, else Tinker's `X-API-Key`."""
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return request.headers.get("x-api-key")


def openai_error(error: Exception) -> JSONResponse:
    """A refused request in OpenAI's error shape (which its client shows), with `detail` too."""
    status = getattr(error, "status", 400)
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": str(error), "type": kind, "param": None, "code": None}, "detail": str(error)}
    return JSONResponse(body, status_code=status)
