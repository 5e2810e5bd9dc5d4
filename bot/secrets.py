"""Agent bot tokens at rest: Fernet (AES-128-CBC + HMAC-SHA256) with a key from the environment."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken


class SecretsError(ValueError):
    """A token cannot be stored or read (no key configured, or the wrong key)."""


class TokenCipher:
    """Encrypts tokens for the database and decrypts them for posting; never logs them."""

    def __init__(self, key: str | None) -> None:
        self._fernet: Fernet | None = None
        if key:
            try:
                self._fernet = Fernet(key.encode())
            except (ValueError, TypeError) as exc:
                raise SecretsError(
                    "FLOTILLA_ENCRYPTION_KEY is not a valid Fernet key "
                    "(32 url-safe base64 bytes; make one with `flotilla secrets new-key`)"
                ) from exc

    @staticmethod
    def new_key() -> str:
        return Fernet.generate_key().decode()

    @property
    def configured(self) -> bool:
        return self._fernet is not None

    def encrypt(self, token: str) -> bytes:
        if self._fernet is None:
            raise SecretsError(
                "storing an agent's bot token needs FLOTILLA_ENCRYPTION_KEY to be set"
            )
        return self._fernet.encrypt(token.encode())

    def decrypt(self, blob: bytes) -> str:
        if self._fernet is None:
            raise SecretsError("reading agent bot tokens needs FLOTILLA_ENCRYPTION_KEY")
        try:
            return self._fernet.decrypt(blob).decode()
        except InvalidToken as exc:
            raise SecretsError(
                "an agent's stored bot token cannot be decrypted with FLOTILLA_ENCRYPTION_KEY "
                "(was the key changed?)"
            ) from exc

    def __repr__(self) -> str:
        return f"TokenCipher(configured={self.configured})"
