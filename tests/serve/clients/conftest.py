"""The shared server (tests/serve/conftest.py), seen through the openai SDK."""

from __future__ import annotations

import pytest

from tests.serve.server import KEY


@pytest.fixture(scope="module")
def client(server, openai_module):
    return openai_module.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
