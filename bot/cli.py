"""The `flotilla` command: run, try, and operate Flotilla."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence

from bot.manifest import agent_manifest, commander_manifest, to_yaml
from bot.secrets import TokenCipher
from bot.settings import Settings
from storage import migrate
from storage.db import Database

log = logging.getLogger("flotilla")
DEV_DATABASE = "sqlite+aiosqlite:///flotilla-dev.db"


def _db_command(args: argparse.Namespace, settings: Settings) -> int:
    async def run() -> int:
        db = Database(settings.database_url)
        try:
            if args.action == "upgrade":
                await migrate.upgrade(db, args.revision or "head")
            elif args.action == "downgrade":
                await migrate.downgrade(db, args.revision or "base")
            revision = await migrate.current_revision(db)
            print(f"database at revision {revision or '(empty)'} (head: {migrate.head_revision()})")
            return 0
        finally:
            await db.dispose()

    return asyncio.run(run())


def _manifest_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.agent:
        manifest = agent_manifest(args.agent, args.display_name or args.agent, args.description)
    else:
        manifest = commander_manifest()
    print(to_yaml(manifest), end="")
    return 0


def _secrets_command(args: argparse.Namespace, settings: Settings) -> int:
    print(TokenCipher.new_key())
    return 0


def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    from bot.serve import ConfigurationError, run

    try:
        asyncio.run(run(settings))
    except ConfigurationError as exc:
        print(f"flotilla: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C is how a server stops
        return 0
    return 0


def _dev_command(args: argparse.Namespace, settings: Settings) -> int:
    from bot.serve import options_from
    from bot.trial import dev

    url = settings.database_url if "FLOTILLA_DATABASE_URL" in os.environ else DEV_DATABASE
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a trial ends
        asyncio.run(dev(url, options_from(settings)))
    return 0


def _demo_command(args: argparse.Namespace, settings: Settings) -> int:
    from bot.serve import options_from
    from bot.trial import demo

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{folder}/demo.db"
        print(asyncio.run(demo(url, options_from(settings))))
    return 0


Handler = Callable[[argparse.Namespace, Settings], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flotilla", description="Flotilla: one assistant, a whole team, in Slack."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="connect to Slack (Socket Mode with SLACK_APP_TOKEN, else HTTP)"
    )
    run.set_defaults(handler=_run_command)

    dev = commands.add_parser(
        "dev", help="try Flotilla in a local Slack workspace from this terminal"
    )
    dev.set_defaults(handler=_dev_command)

    demo = commands.add_parser("demo", help="play a scripted scenario and print the thread")
    demo.set_defaults(handler=_demo_command)

    db = commands.add_parser("db", help="database schema: upgrade | downgrade | current")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", help="target revision (default: head / base)")
    db.set_defaults(handler=_db_command)

    manifest = commands.add_parser("manifest", help="print a Slack app manifest")
    manifest.add_argument("--agent", help="print the manifest for this agent's own Slack app")
    manifest.add_argument("--display-name", help="the agent app's display name")
    manifest.add_argument("--description", default="", help="the agent app's description")
    manifest.set_defaults(handler=_manifest_command)

    secrets = commands.add_parser("secrets", help="new-key: print a new FLOTILLA_ENCRYPTION_KEY")
    secrets.add_argument("action", choices=["new-key"])
    secrets.set_defaults(handler=_secrets_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # pydantic-ai greets interactive terminals with a banner; Flotilla's output is the thread
    os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
    args = build_parser().parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # migrations are not news
    handler: Handler = args.handler
    return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
