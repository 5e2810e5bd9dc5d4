"""The `flotilla` command: run, try, check and operate Flotilla.

Every mistake ends in a sentence on stderr and a distinct exit code (`EXIT_*`); `--debug`
adds the traceback. Settings are read only by the commands that need them, so
`flotilla manifest` works whatever the environment holds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence

from flotilla.bot.settings import (
    ConfigurationError,
    ModelUnavailable,
    Settings,
    load_settings,
    misnamed_settings,
)

EXIT_OK = 0
EXIT_UNEXPECTED = 1  # a bug: the sentence asks for --debug
EXIT_USAGE = 2  # a wrong command line (argparse uses 2 too)
EXIT_CONFIG = ConfigurationError.exit_code  # 3: a setting is missing or wrong
EXIT_DATABASE = 4  # the database cannot be reached or upgraded (DatabaseUnavailable)
EXIT_CHECK = 5  # `flotilla check` found a problem
EXIT_MODEL = ModelUnavailable.exit_code  # 6: `flotilla run` found the model not working
EXIT_INTERRUPTED = 130
DEV_DATABASE = "sqlite+aiosqlite:///flotilla-dev.db"


class UsageError(Exception):
    """A command line that cannot be carried out; `str()` says what to type instead."""

    exit_code = EXIT_USAGE


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # only for --version

    try:
        return version("flotilla")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """`--version`, looked up only when asked for (package metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"flotilla {_version()}")
        parser.exit()


def _settings(*, console: bool = False) -> Settings:
    from flotilla.bot.logs import setup_logging

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format, console=console)
    for sentence in misnamed_settings():  # a typo must not pass unnoticed, nor stop anything
        logging.getLogger("flotilla.settings").warning(sentence)
    # read once, here: libraries must not read them again (Bolt takes SLACK_BOT_TOKEN from
    # the environment by itself and then warns that the client's token wins)
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        os.environ.pop(name, None)
    return settings


# --- commands ---------------------------------------------------------------------------


def _run_command(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.allow_model_errors:
        settings = settings.model_copy(update={"allow_model_errors": True})
    from flotilla.bot.serve import run

    asyncio.run(run(settings))
    return EXIT_OK


def _check_command(args: argparse.Namespace) -> int:
    settings = _settings()
    from flotilla.bot.check import render

    if args.local:
        from flotilla.bot.check import check_locally

        findings = asyncio.run(check_locally(settings))
    else:
        from flotilla.bot.check import run_checks

        findings = asyncio.run(run_checks(settings))
    print(render(findings))
    return EXIT_CHECK if any(f.level == "error" for f in findings) else EXIT_OK


def _dev_command(args: argparse.Namespace) -> int:
    settings = _settings(console=True)
    from flotilla.bot.serve import options_from
    from flotilla.bot.trial import dev

    url = dev_database_url(settings)
    asyncio.run(dev(url, options_from(settings), exit_on_eof=args.exit_on_eof))
    return EXIT_OK


def dev_database_url(settings: Settings) -> str:
    """The trial keeps its own database file unless FLOTILLA_DATABASE_URL is set (in the
    environment or in .env)."""
    return settings.database_url if "database_url" in settings.model_fields_set else DEV_DATABASE


def _demo_command(args: argparse.Namespace) -> int:
    settings = _settings(console=True)
    import tempfile

    from flotilla.bot.serve import options_from
    from flotilla.bot.trial import demo

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{folder}/demo.db"
        print(asyncio.run(demo(url, options_from(settings))))
    return EXIT_OK


def _manifest_command(args: argparse.Namespace) -> int:
    from flotilla.bot.manifest import agent_manifest, commander_manifest, http_manifest, to_yaml

    if args.agent:
        from flotilla.bot.agent_form import name_problem

        problem = name_problem(args.agent)
        if problem:
            raise UsageError(f"--agent {args.agent!r}: {problem}")
        manifest = agent_manifest(args.agent, args.display_name or args.agent, args.description)
    elif args.request_url:
        try:
            manifest = http_manifest(args.request_url)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        manifest = commander_manifest()
    print(to_yaml(manifest), end="")
    return EXIT_OK


def _secrets_command(args: argparse.Namespace) -> int:
    from flotilla.bot.secrets import TokenCipher

    print(TokenCipher.new_key())
    return EXIT_OK


def _db_command(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.action != "upgrade":  # only an upgrade creates a SQLite file that is not there
        from flotilla.bot.check import no_database_yet

        missing = no_database_yet(settings)
        if missing is not None:
            from flotilla.storage.migrate import head_revision

            print(f"{missing} (head: {head_revision()})")
            return EXIT_OK
    target = args.revision or ("head" if args.action == "upgrade" else "base")
    if args.action == "downgrade" and target == "base" and not args.yes:
        where = settings.database_label()
        if not _confirm(f"This drops every Flotilla table in {where}. Type 'yes' to go on: "):
            raise UsageError("nothing was changed: pass --yes to downgrade to base without asking")
    return asyncio.run(_db(settings, args.action, target))


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False  # nobody to ask: refuse, --yes says it on purpose
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


async def _db(settings: Settings, action: str, target: str) -> int:
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    from flotilla.bot.check import open_database
    from flotilla.storage import migrate

    db = await open_database(settings)
    try:
        try:
            if action == "upgrade":
                await migrate.upgrade(db, target)
            elif action == "downgrade":
                await migrate.downgrade(db, target)
        except (CommandError, RevisionError) as exc:
            raise UsageError(
                f"cannot {action} to {target!r}: {str(exc).splitlines()[0]}; use head, base or "
                f"a revision like {migrate.head_revision()} (see `flotilla db current`)"
            ) from exc
        revision = await migrate.current_revision(db)
    finally:
        await db.dispose()
    print(f"database at revision {revision or '(empty)'} (head: {migrate.head_revision()})")
    return EXIT_OK


# --- the parser -------------------------------------------------------------------------

Handler = Callable[[argparse.Namespace], int]

COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "connect to Slack and serve (Socket Mode with SLACK_APP_TOKEN, else HTTP)",
        "Checks Slack, the database and the model first and refuses to start on a problem "
        "(exit code 3 or 4; 6 for the model, unless --allow-model-errors), upgrades the "
        "schema, then serves until SIGTERM/SIGINT, when in-flight work gets "
        "FLOTILLA_SHUTDOWN_GRACE_SECONDS to finish before it is handed over.\n\nReads: "
        "SLACK_BOT_TOKEN, SLACK_APP_TOKEN or SLACK_SIGNING_SECRET, SLACK_API_URL, "
        "FLOTILLA_DATABASE_URL, FLOTILLA_MODEL and the provider keys, "
        "FLOTILLA_ALLOW_MODEL_ERRORS, FLOTILLA_HTTP_HOST/PORT, FLOTILLA_LOG_LEVEL/FORMAT, and "
        "every other FLOTILLA_* setting (README: Configuration).",
    ),
    "check": (
        "check the Slack token and scopes, the mode, the database and the model",
        "Prints one line per check with a sentence for each problem; exit code 5 when "
        "something must be fixed. --local checks against a local Slack workspace and a "
        "throw-away database instead (for CI and a first try).\n\nReads: the same settings "
        "as `flotilla run`.",
    ),
    "dev": (
        "try Flotilla in a local Slack workspace, in the browser and this terminal",
        "Starts a local Slack-compatible workspace, prints the address of its Slack-like page "
        "(opened in a browser when there is a display) and talks to it from the terminal.\n\n"
        "Reads: FLOTILLA_DATABASE_URL (default: flotilla-dev.db), FLOTILLA_MODEL and the "
        "provider keys, FLOTILLA_MAX_PARALLEL, FLOTILLA_RETRY_*.",
    ),
    "demo": (
        "play a scripted scenario and print the thread",
        "Runs one request end to end in a local workspace with a throw-away database.\n\n"
        "Reads: FLOTILLA_MODEL and the provider keys (default: the offline model).",
    ),
    "db": (
        "database schema: upgrade | downgrade | current",
        "upgrade [REVISION] (default head), downgrade [REVISION] (default base: drops every "
        "Flotilla table, asks first unless --yes), current.\n\nReads: FLOTILLA_DATABASE_URL.",
    ),
    "manifest": (
        "print a Slack app manifest",
        "The commander's manifest (Socket Mode), or with --request-url the HTTP-mode one, or "
        "with --agent the manifest of one agent's own Slack app.\n\nReads: no settings.",
    ),
    "secrets": (
        "new-key: print a new FLOTILLA_ENCRYPTION_KEY",
        "Prints a fresh Fernet key for FLOTILLA_ENCRYPTION_KEY.\n\nReads: no settings.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flotilla",
        description="Flotilla: one assistant, a whole team, in Slack.",
        epilog="Settings come from the environment and .env (README: Configuration).",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    # --debug after the command too (`flotilla run --debug`); SUPPRESS keeps the main default
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Handler] = {
        "run": _run_command,
        "check": _check_command,
        "dev": _dev_command,
        "demo": _demo_command,
        "db": _db_command,
        "manifest": _manifest_command,
        "secrets": _secrets_command,
    }
    sub: dict[str, argparse.ArgumentParser] = {}
    for name, (summary, details) in COMMANDS.items():
        sub[name] = commands.add_parser(
            name,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}.\n\n{details}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common],
        )
        sub[name].set_defaults(handler=handlers[name])
    sub["run"].add_argument(
        "--allow-model-errors",
        action="store_true",
        help="serve even when the model check fails (people then read that the model is "
        "unavailable); also FLOTILLA_ALLOW_MODEL_ERRORS=true",
    )
    sub["check"].add_argument(
        "--local", action="store_true", help="check against a local workspace and database"
    )
    sub["dev"].add_argument(
        "--exit-on-eof",
        action="store_true",
        help="stop at the end of input (once Flotilla is at rest) instead of serving on",
    )
    db = sub["db"]
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", help="target revision (default: head / base)")
    db.add_argument("--yes", action="store_true", help="downgrade without asking")
    manifest = sub["manifest"]
    manifest.add_argument("--request-url", help="HTTP mode: https://<host>/slack/events")
    manifest.add_argument("--agent", help="print the manifest for this agent's own Slack app")
    manifest.add_argument("--display-name", help="the agent app's display name")
    manifest.add_argument("--description", default="", help="the agent app's description")
    sub["secrets"].add_argument("action", choices=["new-key"])
    return parser


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    print(f"flotilla: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    # pydantic-ai greets interactive terminals with a banner; Flotilla's output is the thread
    os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    debug: bool = args.debug
    handler: Handler = args.handler
    try:
        return handler(args)
    except (ConfigurationError, UsageError) as exc:
        return _fail(str(exc), exc.exit_code, debug)
    except KeyboardInterrupt:  # Ctrl-C ends a trial or a command
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one sentence, the traceback with --debug
        first = (str(exc).splitlines() or [""])[0][:300]
        return _fail(
            f"unexpected error: {type(exc).__name__}: {first}\n"
            "Run the command again with --debug to see the traceback, and report it.",
            EXIT_UNEXPECTED,
            debug,
        )


if __name__ == "__main__":
    sys.exit(main())
