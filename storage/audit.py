"""The audit log: who changed what in a workspace's configuration, and when.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import (
    AuditRecord,
)
from flotilla.storage.service_tables import (
    AuditEntry,
)

audit_t: Table = AuditEntry.__table__  # type: ignore[assignment]


async def audit(
    conn: AsyncConnection,
    *,
    team_id: str,
    actor: str,
    action: str,
    now: datetime,
    target: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Append to the audit log (who, what, when). Never pass secrets in `details`."""
    await conn.execute(
        insert(audit_t).values(
            team_id=team_id,
            actor=actor,
            action=action,
            target=target,
            details=details or {},
            created_at=now,
        )
    )


async def audit_trail(
    conn: AsyncConnection, team_id: str, *, limit: int = 50
) -> Sequence[AuditRecord]:
    """The newest audit entries of a workspace, newest first."""
    rows = (
        await conn.execute(
            select(audit_t)
            .where(audit_t.c.team_id == team_id)
            .order_by(audit_t.c.id.desc())
            .limit(limit)
        )
    ).mappings()
    return [
        AuditRecord(
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            details=r["details"],
            created_at=r["created_at"],
        )
        for r in rows
    ]
