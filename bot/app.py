"""The Bolt app: wiring only. The listeners live in `bot/listeners/` (one module per
Slack surface); they ack at once, parse, and hand the work to `bot/handlers.py`.

Bolt (async, `process_before_response=False`) acknowledges events before it runs their
listeners, after the global middlewares, which store what Flotilla acts on (messages:
`listeners/messages.py`; clicks, submissions, commands, Home: `listeners/inbox.py`);
interactive listeners call `ack()` first thing.
"""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult

from flotilla.bot.http import measure_requests
from flotilla.bot.identities import make_client
from flotilla.bot.listeners.admin import register_admin
from flotilla.bot.listeners.feedback import register_feedback
from flotilla.bot.listeners.forms import register_forms
from flotilla.bot.listeners.guard import register_fallbacks
from flotilla.bot.listeners.inbox import register_inbox, replay
from flotilla.bot.listeners.messages import register_messages
from flotilla.bot.listeners.plan_card import register_plan_card
from flotilla.bot.metrics import meter
from flotilla.bot.service import SlackService


def build_app(service: SlackService, *, signing_secret: str | None) -> AsyncApp:
    """The commander's Bolt app, wired to `service`.

    Bolt authorizes each request with the service's own `auth.test` answer (asked once per
    token, see `bot/identities.py`) instead of asking again on its first requests.
    """
    commander = service.client

    async def authorize() -> AuthorizeResult:
        return AuthorizeResult.from_auth_test_response(
            auth_test_response=await commander.auth_test(), bot_token=commander.token
        )

    # the token comes with each request's authorization; Bolt's per-request clients copy
    # this one's base URL and retry handlers (the metering among them)
    bolt_client = make_client(None, service.poster.base_url)
    meter(bolt_client, service.metrics)
    app = AsyncApp(
        client=bolt_client,
        authorize=authorize,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=False,
    )

    measure_requests(app, service)  # first: the time until the ack includes the stores
    register_messages(app, service)  # events checked and recorded before the ack
    register_inbox(app, service)  # every other request Flotilla acts on, stored before it
    register_forms(app, service)
    register_plan_card(app, service)
    register_feedback(app, service)
    register_admin(app, service)
    register_fallbacks(app)  # last: what no listener above claims is acked, not a 404
    service.recover_inbox_with(lambda: replay(app, service))
    return app
