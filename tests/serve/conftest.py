"""Fixtures shared by the serve tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tinker

from tests.serve.server_process import API_KEY, ServerProcess


@pytest.fixture(scope="module")
def service(server: ServerProcess) -> Iterator[tinker.ServiceClient]:
    """The real SDK's client of the module's own `server` fixture, its session finished after."""
    client = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    yield client
    client.close("success").result()
