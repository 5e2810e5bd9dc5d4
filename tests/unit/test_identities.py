from __future__ import annotations

import pytest
from pydantic import SecretStr

from flotilla.bot.identities import Identity, Poster, make_client
from flotilla.bot.secrets import SecretsError, TokenCipher


def test_own_app_agents_are_mentioned_for_real_personas_by_name() -> None:
    app = Identity(name="researcher", display_name="Researcher", kind="app", bot_user_id="UR1")
    persona = Identity(name="writer", display_name="Writer", icon=":memo:")
    assert app.mention == "<@UR1>"
    assert persona.mention == "@writer"
    assert app.persona_arguments() == {}
    assert persona.persona_arguments() == {"username": "Writer", "icon_emoji": ":memo:"}
    with_url = Identity(name="a", display_name="A", icon="https://example.com/a.png")
    assert with_url.persona_arguments() == {
        "username": "A",
        "icon_url": "https://example.com/a.png",
    }
    assert Identity(name="b", display_name="", icon="memo").persona_arguments() == {"username": "b"}


def test_tokens_never_show_in_reprs() -> None:
    identity = Identity(name="r", display_name="R", kind="app", token=SecretStr("xoxb-secret-1"))
    cipher = TokenCipher(TokenCipher.new_key())
    assert "xoxb-secret-1" not in repr(identity) + repr(cipher)


def test_poster_uses_the_agents_own_token() -> None:
    commander = make_client("xoxb-commander", "http://127.0.0.1:1/api/")
    poster = Poster(commander, "http://127.0.0.1:1/api/")
    own = Identity(name="r", display_name="R", kind="app", token=SecretStr("xoxb-agent"))
    assert poster.client_for(None) is commander
    assert poster.client_for(Identity(name="w", display_name="W")) is commander
    agent_client = poster.client_for(own)
    assert agent_client.token == "xoxb-agent"
    assert poster.client_for(own) is agent_client  # one client per token
    kinds = {type(h).__name__ for h in agent_client.retry_handlers}
    assert {"AsyncRateLimitErrorRetryHandler", "AsyncServerErrorRetryHandler"} <= kinds


def test_cipher_round_trip_and_errors() -> None:
    cipher = TokenCipher(TokenCipher.new_key())
    blob = cipher.encrypt("xoxb-123")
    assert b"xoxb-123" not in blob
    assert cipher.decrypt(blob) == "xoxb-123"
    with pytest.raises(SecretsError, match="cannot be decrypted"):
        TokenCipher(TokenCipher.new_key()).decrypt(blob)
    with pytest.raises(SecretsError, match="needs FLOTILLA_ENCRYPTION_KEY"):
        TokenCipher(None).encrypt("xoxb-1")
    with pytest.raises(SecretsError, match="not a valid Fernet key"):
        TokenCipher("short")


def test_new_key_command_prints_a_usable_key(capsys: pytest.CaptureFixture[str]) -> None:
    from flotilla.bot.cli import main

    assert main(["secrets", "new-key"]) == 0
    key = capsys.readouterr().out.strip()
    assert TokenCipher(key).decrypt(TokenCipher(key).encrypt("x")) == "x"
