"""What `kitchen serve` answers when it refuses a request: each a 4xx with a message the SDK shows.

Never a 5xx, nor a 408, 409 or 429, for a request the server will not serve: the SDK retries
those (for minutes), so a conflict (a checkpoint that already exists, one already public) is a 400.
"""

from __future__ import annotations


class ServeError(Exception):
    """A request the server refuses, with the HTTP status to answer."""

    status = 400


class NotFound(ServeError):
    status = 404


class Conflict(ServeError):
    """The request clashes with what exists: a 400, since the SDK retries a 409."""


class Gone(ServeError):
    status = 410


class NotServed(ServeError):
    """A Tinker feature kitchen serve does not provide: the message names it, says why, and what
    to use instead (see `kitchen.apps.serve.refusals`)."""

    status = 400
