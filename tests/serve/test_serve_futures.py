"""The server's futures book: finished requests are kept `keep_s` after they finish, then expire
(oldest first); pending ones never do."""

from __future__ import annotations

import asyncio

import pytest

from kitchen.apps.serve import futures
from kitchen.apps.serve.futures import FutureBook, Outcome


def test_finished_requests_expire_keep_s_after_finishing(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(futures.time, "monotonic", lambda: now[0])

    async def main() -> None:
        book = FutureBook(keep_s=10.0)
        for rid in ("a", "b", "pending"):
            book.start(rid, "owner")
        book.finish("a", Outcome(json={"n": 1}))
        now[0] += 5.0
        book.finish("b", Outcome(json={"n": 2}))
        now[0] += 6.0  # "a" finished 11 s ago, "b" 6 s ago
        book.start("c", "owner")  # a new request expires the stale ones
        assert book.get("a", "owner") is None
        b = book.get("b", "owner")
        assert b is not None and b.future.result() == Outcome(json={"n": 2})
        now[0] += 100.0
        _, new = book.start("a", "owner")  # an expired id starts afresh
        assert new and book.get("b", "owner") is None
        assert book.get("pending", "owner") is not None and book.get("c", "owner") is not None
        assert book.get("a", "owner") is not None

    asyncio.run(main())
