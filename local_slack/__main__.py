"""Run the local Slack-compatible workspace standalone.

    python -m flotilla.local_slack --port 3333 --app Flotilla=http://127.0.0.1:3000/slack/events
    python -m flotilla.local_slack --manifest manifest.yml        # Socket Mode

prints the Web API URL, the browser page's address (see web_page.py) and each app's tokens,
then lets you type as a person (see console.py): from a terminal, a pipe or a file; at the end
of input it serves on until Ctrl-C, or stops with --exit-on-eof.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

import yaml

from flotilla.local_slack.console import Console
from flotilla.local_slack.driver import Driver
from flotilla.local_slack.workspace import LocalWorkspace

# every scope an app installed with --app gets: at least those Flotilla's manifest asks for
ALL_SCOPES = (
    "app_mentions:read",
    "channels:history",
    "channels:read",
    "chat:write",
    "chat:write.customize",
    "chat:write.public",
    "commands",
    "files:read",
    "files:write",
    "groups:history",
    "groups:read",
    "im:history",
    "im:read",
    "im:write",
    "metadata.message:read",
    "users:read",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m flotilla.local_slack", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3333)
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="NAME=REQUEST_URL",
        help="install an app whose events, interactivity and /commands go to REQUEST_URL",
    )
    parser.add_argument(
        "--command", action="append", default=[], help="slash command, e.g. /flotilla"
    )
    parser.add_argument(
        "--manifest",
        action="append",
        default=[],
        metavar="PATH[=REQUEST_URL]",
        help="install an app from its manifest (YAML or JSON); with a URL it runs in HTTP mode",
    )
    parser.add_argument(
        "--people", default="alice,bob", help="comma-separated; the first is an admin"
    )
    parser.add_argument("--channel", default="general")
    parser.add_argument("--rate-limits", action="store_true", help="answer 429 like Slack does")
    parser.add_argument("--no-console", action="store_true", help="serve only; do not read stdin")
    parser.add_argument(
        "--exit-on-eof",
        action="store_true",
        help="stop at the end of standard input (default: serve on until Ctrl-C)",
    )
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ws = LocalWorkspace(rate_limits=args.rate_limits)
    await ws.start(args.host, args.port)
    names = [n.strip() for n in args.people.split(",") if n.strip()] or ["alice"]
    people = [ws.add_person(name, admin=i == 0) for i, name in enumerate(names)]
    apps = []
    for spec in args.app:
        name, _, url = spec.partition("=")
        commands: dict[str, str | None] = {c: None for c in args.command}
        apps.append(
            ws.install_app(name, request_url=url or None, scopes=ALL_SCOPES, commands=commands)
        )
    for spec in args.manifest:
        path, _, url = spec.partition("=")
        manifest = yaml.safe_load(Path(path).read_text())
        apps.append(
            ws.install_manifest(
                manifest, request_url=url or None, socket_mode=False if url else None
            )
        )
    channel = ws.create_channel(args.channel, [*people, *apps])
    print(f"Local Slack workspace {ws.state.team_name} ({ws.state.team_id})")
    print(f"  Web API base URL: {ws.api_url}")
    print(f"  In the browser: {ws.page_url}?as={people[0].name}")
    print(f"  #{channel.name} = {channel.id}; people: {', '.join(p.name for p in people)}")
    for app in apps:
        where = "Socket Mode" if app.socket_mode else app.request_url
        print(f"  app {app.name} ({app.app_id}) -> {where}")
        print(f"    SLACK_BOT_TOKEN={app.bot_token}")
        print(f"    SLACK_SIGNING_SECRET={app.signing_secret}")
        if app.app_token:
            print(f"    SLACK_APP_TOKEN={app.app_token}  (Socket Mode)")
    try:
        if args.no_console:
            await asyncio.Event().wait()
        else:
            await Console(Driver(ws), people[0], channel).run(exit_on_eof=args.exit_on_eof)
    finally:
        await ws.stop()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
