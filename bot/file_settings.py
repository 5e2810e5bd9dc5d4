"""What attachments Flotilla takes and where file bytes are kept (one part of
`bot.settings.Settings`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, field_validator
from pydantic_settings import NoDecode

if TYPE_CHECKING:
    from flotilla.agents.tools.file_policy import FilePolicy


def _default_file_types() -> tuple[str, ...]:
    from flotilla.agents.tools.file_policy import DEFAULT_TYPES

    return DEFAULT_TYPES


class FileSettings(BaseModel):
    """The size, media types and origins of attachments, and where their bytes are kept."""

    file_max_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1,
        le=1 << 30,
        validation_alias=AliasChoices("FLOTILLA_FILE_MAX_BYTES"),
        description="The largest attachment Flotilla fetches (and file an agent may write), "
        "in bytes; counted as the bytes arrive, whatever Content-Length says.",
    )
    file_types: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_default_file_types()),
        validation_alias=AliasChoices("FLOTILLA_FILE_TYPES"),
        description="Comma-separated media types of attachments Flotilla takes (`*` "
        "wildcards, e.g. text/*,application/pdf,image/png); others get a sentence.",
    )
    file_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["https://files.slack.com"],
        validation_alias=AliasChoices("FLOTILLA_FILE_HOSTS"),
        description="Comma-separated origins attachments are fetched from with the bot "
        "token; a file URL anywhere else is never fetched.",
    )
    file_storage: Literal["database", "disk"] = Field(
        default="database",
        validation_alias=AliasChoices("FLOTILLA_FILE_STORAGE"),
        description="Where file bytes are kept: in the database, or on disk under "
        "FLOTILLA_FILE_DIR.",
    )
    file_dir: str = Field(
        default="flotilla-files",
        validation_alias=AliasChoices("FLOTILLA_FILE_DIR"),
        description="The folder for file bytes when FLOTILLA_FILE_STORAGE=disk.",
    )
    file_retention_days: float = Field(
        default=7.0,
        gt=0,
        le=3660,
        validation_alias=AliasChoices("FLOTILLA_FILE_RETENTION_DAYS"),
        description="How long file bytes are kept; housekeeping deletes them after (the "
        "file records stay); at most ten years.",
    )

    @field_validator("file_types", "file_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("file_hosts")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            parts = urlsplit(origin)
            if parts.scheme not in ("https", "http") or not parts.hostname or parts.path.strip("/"):
                raise ValueError(f"{origin!r} is not an origin like https://files.slack.com")
        return [o.rstrip("/") for o in value]

    def file_policy(self) -> FilePolicy:
        """What attachments are taken and how file bytes are kept (for the service)."""
        from flotilla.agents.tools.file_policy import FilePolicy
        from flotilla.storage.files import ByteStore

        store = ByteStore(
            where=self.file_storage,
            directory=Path(self.file_dir),
            retention=timedelta(days=self.file_retention_days),
        )
        return FilePolicy(
            max_bytes=self.file_max_bytes, allowed_types=tuple(self.file_types), store=store
        )
