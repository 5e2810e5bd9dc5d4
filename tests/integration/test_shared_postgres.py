"""The run's PostgreSQL (`tests/shared_postgres.py`): without a URL, one throw-away server
started by whichever process asks first and shared by the others; in it, a database of each
process's own, dropped at its end – or, left by a killed run, by the next run."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.shared_postgres import DATABASE_PREFIX, POSTGRES_URL_ENV, SharedPostgres
from tests.throwaway_postgres import remove_server

pytestmark = pytest.mark.postgres


async def databases(url: str, names: list[str]) -> list[str]:
    """Which of `names` exist on the server of `url`."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            found = await conn.scalars(
                text("SELECT datname FROM pg_database WHERE datname = ANY(:names)"),
                {"names": names},
            )
            return sorted(found.all())
    finally:
        await engine.dispose()


async def create_database(url: str, name: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await engine.dispose()


async def test_workers_share_one_throwaway_server_each_in_a_database_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(POSTGRES_URL_ENV, raising=False)
    # as `configure` makes it: outside pytest's own temp dirs, which the postgres user (the
    # server's, when the tests run as root) may not enter
    folder = Path(tempfile.mkdtemp(prefix="flotilla-test-pg-"))
    folder.chmod(0o711)
    gw0 = SharedPostgres(folder, "gw0", owns_folder=True)
    gw1 = SharedPostgres(folder, "gw1", owns_folder=False)
    try:
        first, second = gw0.database_url(), gw1.database_url()
        assert gw0.database_url() == first  # created once per process
        server, name = first.rsplit("/", 1)
        assert second.rsplit("/", 1)[0] == server  # one server
        assert second.rsplit("/", 1)[1] != name  # two databases
        gw0.drop_database()
        gw1.drop_database()
        url = gw0.server_url()
        assert await databases(url, [name, second.rsplit("/", 1)[1]]) == []

        # a killed run's database (its process is gone) is dropped by the next run's first
        gone = subprocess.Popen(["true"])
        gone.wait()
        left_over = f"{DATABASE_PREFIX}{gone.pid}_gw0_abcdef"
        await create_database(url, left_over)
        again = SharedPostgres(folder, "gw0", owns_folder=False)
        again.database_url()
        assert await databases(url, [left_over]) == []
        again.drop_database()
    finally:
        remove_server(folder / "server")
        shutil.rmtree(folder)
    assert not folder.exists()
