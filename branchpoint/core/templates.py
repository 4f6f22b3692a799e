"""Jinja2 templates for persona text, bios and system prompts, always in a sandbox.

Scenario files are data written by people we do not have to trust, so templates run in
``SandboxedEnvironment`` (no attribute access to internals, no arbitrary calls) with
``StrictUndefined`` (a misspelt placeholder is an error, never an empty string in a prompt).
This is the project's one sandbox: the persona's and the judge's prompt files are compiled in it
too (``prompt_template``), since the values they render come from scenarios and models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache, partial
from typing import Any

from jinja2 import (
    StrictUndefined,
    TemplateError,
    TemplateSyntaxError,
    UndefinedError,
    meta,
    nodes,
)
from jinja2 import sandbox as jinja_sandbox
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup, escape

from branchpoint.core.errors import UserError
from branchpoint.core.untrusted import markdown, visible

# What ``*`` and ``**`` may build: characters of text, items of a list, or bits of a number.
# ``{{ 9 ** 999999 }}`` or ``{{ 'x' * 10 ** 9 }}`` would otherwise hang or fill memory when a
# scenario is validated or run; no prompt needs more than this.
MAX_OPERATOR_RESULT = 100_000

# Attributes the sandbox refuses on some objects; every other name it refuses starts with ``_``.
_INTERNAL_NAMES = frozenset(
    {"mro"}
    | jinja_sandbox.UNSAFE_FUNCTION_ATTRIBUTES
    | jinja_sandbox.UNSAFE_METHOD_ATTRIBUTES
    | jinja_sandbox.UNSAFE_GENERATOR_ATTRIBUTES
    | jinja_sandbox.UNSAFE_COROUTINE_ATTRIBUTES
    | jinja_sandbox.UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
)


class _BoundedSandbox(SandboxedEnvironment):
    """The sandbox, with ``*`` and ``**`` refused when their result would be enormous."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if _too_large(operator, left, right):
            raise SecurityError(
                f"{operator!r} would build a result over {MAX_OPERATOR_RESULT} characters, items "
                "or bits"
            )
        return super().call_binop(context, operator, left, right)


def _too_large(operator: str, left: Any, right: Any) -> bool:
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            return abs(left) > 1 and left.bit_length() * right > MAX_OPERATOR_RESULT
        return False  # floats overflow quickly and raise
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
            return len(seq) * times > MAX_OPERATOR_RESULT
    return False


_ENV = _BoundedSandbox(
    undefined=StrictUndefined,
    autoescape=False,  # plain text for models, not HTML
    keep_trailing_newline=True,
)


def _keep_spaces(text: str) -> Markup:
    """``text`` HTML-escaped, with each pair of spaces written ``&nbsp;&nbsp;`` so a browser shows
    them (a tab the policy wrote as four spaces, aligned text in a table cell). The text is escaped
    here, as autoescaping would; only the entities this adds are markup."""
    return escape(text).replace("  ", Markup("&nbsp;&nbsp;"))


# Pages for people (the report, its transcript pages): the same sandbox, every value HTML-escaped
# unless the template marks it safe, so model text can never become markup or script. The filter
# ``visible`` applies the one untrusted-text policy (``branchpoint.core.untrusted``) before the escaping.
_HTML_ENV = _BoundedSandbox(undefined=StrictUndefined, autoescape=True)
_HTML_ENV.filters["visible"] = visible
_HTML_ENV.filters["keep_spaces"] = _keep_spaces


def html_template(source: str) -> Any:
    """A compiled HTML template (sandboxed, autoescaping, strict about undefined names)."""
    return _HTML_ENV.from_string(source)


# Markdown documents for people (report.md): the same sandbox, not HTML-escaped (an entity is
# shown as typed in Markdown); values from outside go through ``md`` (a paragraph) or ``md_cell``
# (a table cell), the policy's Markdown form. The overlay gets a filter table of its own so that
# prompt templates do not gain these filters.
_MARKDOWN_ENV = _ENV.overlay(trim_blocks=True, lstrip_blocks=True)
_MARKDOWN_ENV.filters = {
    **_ENV.filters,
    "md": markdown,
    "md_cell": partial(markdown, one_line=True),
}


def markdown_template(source: str) -> Any:
    """A compiled Markdown template (sandboxed, strict; ``md`` and ``md_cell`` escape values)."""
    return _MARKDOWN_ENV.from_string(source)


# The project's prompt files (persona.j2, the judge's prompt): the same sandbox, a file's final
# newline dropped (an overlay shares the sandbox's settings and caches)
_PROMPT_ENV = _ENV.overlay(keep_trailing_newline=False)


def prompt_template(source: str) -> Any:
    """A prompt file's text compiled in the sandbox (``.render(**values)`` renders it)."""
    return _PROMPT_ENV.from_string(source)


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


def unsafe_attribute(source: str) -> str | None:
    """The first internal attribute ``source`` reaches for (``__class__``, ``__globals__``...).

    Found in the parsed template, not by rendering, so that a branch the scenario's values do not
    take (``{% if false %}{{ x.__class__ }}{% endif %}``) is caught too. Assumes it parses."""
    for name in _attribute_names(_ENV.parse(source)):
        if name.startswith("__") or name in _INTERNAL_NAMES:
            return name
    return None


def _attribute_names(tree: nodes.Node) -> Iterator[str]:
    """Names read as ``x.name``, ``x['name']`` or ``x|attr('name')``, in template order.

    Children come before their parent, so ``''.__class__.__mro__`` yields ``__class__`` first."""
    for child in tree.iter_child_nodes():
        yield from _attribute_names(child)
    node = tree
    if isinstance(node, nodes.Getattr):
        yield node.attr
    elif isinstance(node, nodes.Getitem):
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            yield node.arg.value
    elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
        first = node.args[0]
        if isinstance(first, nodes.Const):
            yield str(first.value)


def render_problem(source: str, variables: Mapping[str, Any]) -> str | None:
    """Why ``source`` cannot be rendered with ``variables`` in the sandbox, or None if it can."""
    if not is_template(source):
        return None
    try:
        _compiled(source).render(**variables)
    except SecurityError as exc:
        return f"template does something the sandbox forbids: {exc.message or exc}"
    except UndefinedError as exc:
        return f"template reads an undefined value: {exc.message or exc}"
    except TemplateError as exc:
        return f"template failed: {exc.message or exc}"
    except Exception as exc:  # the template is untrusted: whatever it raises is its own fault
        return f"template failed: {type(exc).__name__}: {exc}"
    return None


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
    except Exception as exc:  # the template is untrusted: ``{{ 1 / 0 }}`` raises ZeroDivisionError
        known = ", ".join(sorted(variables)) or "none"
        why = (exc.message if isinstance(exc, TemplateError) else None) or str(exc)
        if not isinstance(exc, TemplateError):
            why = f"{type(exc).__name__}: {why}"
        raise TemplateRenderError(
            f"template failed: {why} (in {_snippet(template_str)!r}; variables available: {known})"
        ) from None
