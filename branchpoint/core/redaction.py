"""Keeping secrets out of the store, logs, exports and reports.

``redact(obj)`` walks dicts, lists and strings: values under secret-looking keys are replaced, and
any string that contains an API key (a known pattern, or the value of an environment variable
whose name says it holds a secret) has it masked. Cheap enough to call on every stored record.
"""

from __future__ import annotations

import os
import re
from typing import Any

MASK = "***"

_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|password|passwd|token|authorization|auth|credential|private[_-]?key)$",
    re.IGNORECASE,
)
# Only whole keys named like these are secrets: "max_tokens" is not ("tokens" != "token").
_NOT_SECRET = {"max_tokens", "tokens_in", "tokens_out", "max_new_tokens", "stop_token", "eos_token"}
_KEY_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}"  # OpenAI / Anthropic style
    r"|hf_[A-Za-z0-9]{16,}"  # Hugging Face
    r"|AIza[0-9A-Za-z_\-]{20,}"  # Google
    r"|gsk_[A-Za-z0-9]{16,}"  # Groq
    r"|(?<=[Bb]earer )[A-Za-z0-9._\-]{8,}"
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@))"  # user:password@ in URLs
)
_ENV_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)


def _env_secrets() -> list[str]:
    # Read on each call: tests and users set keys after import. Short values would mask words.
    return [v for k, v in os.environ.items() if _ENV_SECRET.search(k) and len(v) >= 8]


def env_secrets() -> list[str]:
    """The values to mask, read once: an export masks millions of texts with one list."""
    return _env_secrets()


def is_secret_key(name: str) -> bool:
    return name.lower() not in _NOT_SECRET and bool(_SECRET_KEY.search(name))


def redact_text(text: str, _secrets: list[str] | None = None) -> str:
    """``text`` with API keys, bearer tokens and URL passwords masked."""
    if not text:
        return text
    secrets = _env_secrets() if _secrets is None else _secrets
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    return _KEY_PATTERNS.sub(MASK, text)


def redact(obj: Any, _secrets: list[str] | None = None) -> Any:
    """A copy of ``obj`` (dicts, lists, strings, pydantic models) that is safe to store or print."""
    secrets = _env_secrets() if _secrets is None else _secrets
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump()
    if isinstance(obj, dict):
        return {
            k: (
                MASK
                if isinstance(k, str) and is_secret_key(k) and v not in (None, "")
                else redact(v, secrets)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v, secrets) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    return obj
