"""Files of the local workspace: what people attach and apps upload, in Slack's shapes.

`url_private` points at the workspace itself (`/files-pri/<team>-<id>/<name>`) and is served
only with a bot token of an app that can see the file (Authorization: Bearer), as Slack's
file host does. Uploads follow Slack's external flow: `files.getUploadURLExternal` gives an
upload URL on this server, the bytes are POSTed there, `files.completeUploadExternal`
shares the file (see `web_files.py`).
"""

from __future__ import annotations

import mimetypes
import secrets
import string
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

Json = dict[str, Any]


def new_file_id() -> str:
    """A Slack-looking file id: F plus 10 upper-case alphanumerics."""
    alphabet = string.ascii_uppercase + string.digits
    return "F" + "".join(secrets.choice(alphabet) for _ in range(10))


# Slack's filetype names for the common types (files.info's `filetype`, `pretty_type`)
_FILETYPES = {
    ".txt": ("text", "Plain Text"),
    ".md": ("markdown", "Markdown (raw)"),
    ".csv": ("csv", "CSV"),
    ".json": ("json", "JSON"),
    ".pdf": ("pdf", "PDF"),
    ".png": ("png", "PNG"),
    ".jpg": ("jpg", "JPEG"),
    ".jpeg": ("jpg", "JPEG"),
    ".gif": ("gif", "GIF"),
    ".zip": ("zip", "Zip"),
    ".exe": ("binary", "Binary"),
}


@dataclass
class LocalFile:
    """One file: its bytes, who made it and where it is shared."""

    id: str
    name: str
    title: str
    mimetype: str
    data: bytes | None  # None until an external upload's bytes arrived
    user: str  # the person or bot user who uploaded it
    created: int
    app_id: str | None = None  # the app that uploaded it (external uploads)
    length: int = 0  # the length announced by files.getUploadURLExternal
    completed: bool = True
    channels: list[str] = field(default_factory=list)  # where it is shared
    shares: dict[str, list[str]] = field(default_factory=dict)  # channel -> message ts
    granted: set[str] = field(default_factory=set)  # apps a person gave it to (a form's file)

    @property
    def size(self) -> int:
        return len(self.data or b"")


def guess_mimetype(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


class FileStore:
    """Every file of the workspace, and the upload URLs handed out and not used yet."""

    def __init__(self) -> None:
        self.files: dict[str, LocalFile] = {}
        self.uploads: dict[str, str] = {}  # upload token -> file id
        self.base_url = ""  # the workspace's address, set when it starts serving
        self.downloads: list[tuple[str, str]] = []  # (file id, app id) of every download

    def add(
        self,
        name: str,
        data: bytes | None,
        *,
        user: str,
        mimetype: str | None = None,
        title: str | None = None,
        app_id: str | None = None,
        length: int = 0,
    ) -> LocalFile:
        file = LocalFile(
            id=new_file_id(),
            name=PurePosixPath(name).name or "file",
            title=title or PurePosixPath(name).name,
            mimetype=mimetype or guess_mimetype(name),
            data=data,
            user=user,
            created=int(time.time()),
            app_id=app_id,
            length=length,
            completed=data is not None,
        )
        self.files[file.id] = file
        return file

    def upload_url(self, file: LocalFile) -> str:
        token = secrets.token_urlsafe(16)
        self.uploads[token] = file.id
        return f"{self.base_url}upload/{token}"

    def url_private(self, team_id: str, file: LocalFile) -> str:
        return f"{self.base_url}files-pri/{team_id}-{file.id}/{file.name}"

    def shape(self, team_id: str, file: LocalFile, *, domain: str = "flotilla-local") -> Json:
        """The file object as Slack gives it in events and files.info."""
        suffix = PurePosixPath(file.name).suffix.lower()
        filetype, pretty = _FILETYPES.get(suffix, (suffix.lstrip(".") or "binary", "File"))
        url = self.url_private(team_id, file)
        public_channels = [c for c in file.channels if c.startswith("C")]
        private_channels = [c for c in file.channels if not c.startswith("C")]
        return {
            "id": file.id,
            "created": file.created,
            "timestamp": file.created,
            "name": file.name,
            "title": file.title,
            "mimetype": file.mimetype,
            "filetype": filetype,
            "pretty_type": pretty,
            "user": file.user,
            "user_team": team_id,
            "mode": "hosted",
            "editable": False,
            "is_external": False,
            "external_type": "",
            "is_public": bool(public_channels),
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "size": file.size,
            "url_private": url,
            "url_private_download": url + "?download=1",
            "permalink": f"https://{domain}.slack.com/files/{file.user}/{file.id}/{file.name}",
            "permalink_public": f"https://slack-files.com/{team_id}-{file.id}-local",
            "shares": {
                kind: {c: [{"ts": ts} for ts in file.shares.get(c, [])] for c in channels}
                for kind, channels in (("public", public_channels), ("private", private_channels))
                if channels
            },
            "has_rich_preview": False,
            "file_access": "visible",
        }
