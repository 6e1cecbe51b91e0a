"""Token authentication of every cluster a live run starts or joins: Ray's mode must be `token`,
and the token file must be readable by its owner only (a local run without one writes one)."""

from __future__ import annotations

import stat

import pytest

from dynaresize.config_io import ConfigError
from dynaresize.executor.cluster.auth import check_token_auth


@pytest.fixture
def token_env(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    token = tmp_path / "ray" / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    return token


def test_a_local_run_writes_a_private_token_when_there_is_none(token_env) -> None:
    check_token_auth(None)
    assert stat.S_IMODE(token_env.stat().st_mode) == 0o600
    first = token_env.read_text()
    check_token_auth(None)
    assert token_env.read_text() == first and len(first) == 64  # never replaced


def test_a_token_file_others_can_read_is_refused_naming_it(token_env) -> None:
    token_env.parent.mkdir()
    token_env.write_text("x" * 64)
    token_env.chmod(0o644)
    with pytest.raises(ConfigError, match=r"can be read by other users \(mode 644\); run chmod"):
        check_token_auth(None)
    assert token_env.read_text() == "x" * 64


def test_auth_disabled_is_refused_locally_and_required_when_joining(token_env, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE=disabled"):
        check_token_auth(None)
    monkeypatch.delenv("RAY_AUTH_MODE")
    with pytest.raises(ConfigError, match=r"--address 10\.0\.0\.1:6379: set RAY_AUTH_MODE=token"):
        check_token_auth("10.0.0.1:6379")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConfigError, match="no Ray token"):  # joining never writes a token
        check_token_auth("10.0.0.1:6379")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "y" * 64)
    check_token_auth("10.0.0.1:6379")
