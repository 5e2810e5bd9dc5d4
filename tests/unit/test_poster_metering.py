"""Every Web API client Flotilla makes is metered: the commander's and each agent app's."""

from __future__ import annotations

from pydantic import SecretStr

from flotilla.bot.identities import Identity, Poster, make_client
from flotilla.bot.metrics import Metrics, SlackCallMeter, meter


def test_an_agent_apps_client_is_metered_like_the_commanders() -> None:
    metrics = Metrics()
    commander = make_client("xoxb-commander", "http://127.0.0.1:9/api/")
    meter(commander, metrics)
    poster = Poster(
        commander, "http://127.0.0.1:9/api/", on_client=lambda made: meter(made, metrics)
    )
    app = Identity(name="scout", display_name="Scout", kind="app", token=SecretStr("xoxb-scout"))
    client = poster.client_for(app)
    assert client is not commander
    assert isinstance(client.retry_handlers[0], SlackCallMeter)
    assert poster.client_for(app) is client  # made once per token
    persona = Identity(name="writer", display_name="Writer")
    assert poster.client_for(persona) is commander
    assert sum(isinstance(h, SlackCallMeter) for h in commander.retry_handlers) == 1
