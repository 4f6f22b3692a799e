"""Jinja2 templates for persona text, bios and system prompts, always in a sandbox.

Scenario files are data written by people we do not have to trust, so templates run in
``SandboxedEnvironment`` (no attribute access to internals, no arbitrary calls) with
``StrictUndefined`` (a misspelt placeholder is an error, never an empty string in a prompt).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, meta
from jinja2.sandbox import SandboxedEnvironment

from core.errors import UserError

_ENV = SandboxedEnvironment(
    undefined=StrictUndefined,
    autoescape=False,  # plain text for models, not HTML
    keep_trailing_newline=True,
)


class TemplateRenderError(UserError):
    """A template failed to parse or render; the message says which and why, on one line."""


def _snippet(source: str, limit: int = 40) -> str:
    flat = " ".join(source.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def syntax_problem(source: str) -> str | None:
    """Why ``source`` does not parse as a template, or None if it does."""
    try:
        _ENV.parse(source)
    except TemplateSyntaxError as exc:
        where = f" on line {exc.lineno} of the template" if source.count("\n") else ""
        return f"template does not parse: {exc.message}{where}"
    return None


def undeclared_names(source: str) -> set[str]:
    """Names the template reads from its context (assumes it parses)."""
    return set(meta.find_undeclared_variables(_ENV.parse(source)))


def is_template(text: str) -> bool:
    return "{{" in text or "{%" in text or "{#" in text


@lru_cache(maxsize=4096)
def _compiled(source: str) -> Any:
    return _ENV.from_string(source)


def render(template_str: str, **variables: Any) -> str:
    """Render ``template_str`` in the sandbox. Raises :class:`TemplateRenderError` with a clear message."""
    if not is_template(template_str):
        return template_str  # fast path: most text has no placeholders
    try:
        return str(_compiled(template_str).render(**variables))
    except TemplateSyntaxError as exc:
        raise TemplateRenderError(
            f"template does not parse: {exc.message} (in {_snippet(template_str)!r})"
        ) from None
    except TemplateError as exc:
        known = ", ".join(sorted(variables)) or "none"
        raise TemplateRenderError(
            f"template failed: {exc.message or exc} (in {_snippet(template_str)!r}; "
            f"variables available: {known})"
        ) from None
