"""The local Slack-compatible workspace: Web API, Events API, interactivity, slash commands
and Socket Mode on loopback, faithful enough that the real Bolt app runs against it unchanged.

Use it from Python::

    ws = LocalWorkspace(ack_timeout=3.0)
    await ws.start("127.0.0.1", 0)            # ws.api_url -> AsyncWebClient(base_url=...)
    alice = ws.add_person("alice", admin=True)
    app = ws.install_app("Flotilla", request_url=url, scopes=[...], bot_events=[...],
                         commands={"/flotilla": None}, socket_mode=False)
    ws.create_channel("general", [alice, app])
    driver = Driver(ws)                         # act as people, await conditions
    ...
    await ws.stop()

or standalone: ``python -m flotilla.local_slack --port 3333 --app Flotilla=http://…/slack/events``.
People can use it in a browser too: ``ws.page_url`` is a Slack-like page (see web_page.py).

Web API: auth.test, chat.postMessage, chat.update, chat.delete, chat.postEphemeral,
chat.startStream/appendStream/stopStream, assistant.threads.setStatus,
conversations.replies/history/info/members/open,
users.info, views.open/push/update/publish, apps.connections.open.
Events: app_mention, message (message.channels/groups/im; subtypes bot_message,
thread_broadcast, message_changed, message_deleted), app_home_opened.
Interactivity: block_actions (messages and views), view_submission (response_action errors,
update, push, clear), view_closed, slash commands, response_url.
"""

from flotilla.local_slack.driver import Driver
from flotilla.local_slack.records import InstalledApp, Message, Person, View
from flotilla.local_slack.workspace import LocalWorkspace

__all__ = ["Driver", "InstalledApp", "LocalWorkspace", "Message", "Person", "View"]
