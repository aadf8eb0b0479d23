"""Keeps API keys out of every text we produce: error reasons, log lines, warehouse rows."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Key shapes of common providers, redacted even when we do not know the value (a server may echo one).
_KEY_PATTERNS = re.compile(r"(sk-[A-Za-z0-9_\-*.]{6,}|sk_[A-Za-z0-9_\-*.]{6,}|Bearer\s+[A-Za-z0-9_\-.=]{6,})")
REDACTED = "[REDACTED]"


class Redactor:
    """Replaces known secret values and key-shaped strings with ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: object) -> str:
        out = str(text)
        for secret in self._secrets:
            out = out.replace(secret, REDACTED)
        return _KEY_PATTERNS.sub(REDACTED, out)


def short(text: object, limit: int = 240) -> str:
    """One line, at most ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
