"""The `flotilla` command: run, try, and operate Flotilla."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence

from bot.manifest import agent_manifest, commander_manifest, to_yaml
from bot.secrets import TokenCipher
from bot.settings import Settings
from storage import migrate
from storage.db import Database

log = logging.getLogger("flotilla")


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


Handler = Callable[[argparse.Namespace, Settings], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flotilla", description="Flotilla: one assistant, a whole team, in Slack."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    args = build_parser().parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler = args.handler
    return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
