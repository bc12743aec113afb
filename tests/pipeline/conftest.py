"""Fixtures of the pipeline's tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["token", "session"], name="agent")
def alice_agent(request: pytest.FixtureRequest, alice: Any, client_for: Any,
          session_client_for: Any) -> Any:
    """``agent``: the agent acting for alice, once with her token and once in her session."""
    return (client_for if request.param == "token" else session_client_for)(alice)
