"""Read YAML into pydantic models with errors that point at the exact line and column.

Generic on purpose: scenarios, prompt conditions, crisis resources and the judges' rubrics all
load through :func:`load_model`. Every problem becomes a :class:`LoadError` whose ``str()`` is one
line, ``path/file.yaml:LINE:COL: field.path: what is wrong (expected ...)``, and a file reports all
its problems at once, not only the first.

The YAML is parsed with ruamel's round-trip loader because it keeps the line and column of every
key and value; its output is converted to plain dicts, lists and scalars before validation, and
custom tags (``!!python/object`` and friends) are rejected, so nothing is ever constructed from a
tag. Size, nesting depth and aliases are bounded (branchpoint/core/yaml_limits.py) before anything is expanded.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import marshal
import os
import sys
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedKeyMap, CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scalarbool import ScalarBoolean

from branchpoint.core.errors import FieldProblem
from branchpoint.core.untrusted import visible
from branchpoint.core.yaml_limits import (
    MAX_FILE_BYTES,
    BoundedComposer,
    BoundedScanner,
    YAMLLimitError,
)

M = TypeVar("M", bound=BaseModel)
# One step of a path into a document: a mapping key or a list index. YAML mapping keys may also
# be numbers or null (``1.5: x``, ``~: y``); positions keep them as the file has them.
LocPart = str | int | float | None
Loc = tuple[LocPart, ...]

# Ids of scenarios, stages, criteria, rubrics: here, so that error messages can recognise it.
ID_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"

# Field marker for errors on the whole file, not on one field of it.
FILE_FIELD = "<file>"
YAML_FIELD = "<yaml>"
ROOT_FIELD = "<document>"


@dataclass(frozen=True, order=True)
class LoadError:
    """One problem in one file. ``line`` and ``col`` are 1-based."""

    path: str
    line: int
    col: int
    field: str
    message: str

    def __post_init__(self) -> None:
        # Always one line, and nothing from the file can drive the terminal (escape sequences).
        for name in ("path", "field", "message"):
            object.__setattr__(self, name, visible(getattr(self, name), multiline=False))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.field}: {self.message}"


@dataclass(frozen=True)
class NodePos:
    """Where a value sits in its file (1-based), and the key that introduces it."""

    line: int
    col: int
    key_line: int
    key_col: int
    container: bool  # a mapping or a list: errors point at its key, not at its first child
    field: str  # the path as written in the file, e.g. ``scenarios[2].persona.age``


class PosMap(dict[Loc, NodePos]):
    """Position of every value of a parsed document, keyed by its path (keys and list indexes)."""

    def nearest(self, loc: Loc) -> tuple[Loc, NodePos]:
        """The deepest known ancestor of ``loc`` (the root is always known)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self:
                return loc[:end], self[loc[:end]]
        return (), NodePos(1, 1, 1, 1, True, "")


def format_loc(loc: Iterable[LocPart]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# --------------------------------------------------------------------------------------------
# reading and parsing


def read_text(path: str | Path) -> tuple[str | None, list[LoadError]]:
    """The file's text, or a one-line error: missing, unreadable, not UTF-8, empty."""
    shown = str(path)
    try:
        raw = _read_bounded(Path(path))
    except _TooLarge as exc:
        return None, [LoadError(shown, 1, 1, FILE_FIELD, str(exc))]
    except FileNotFoundError:
        return None, [LoadError(shown, 1, 1, FILE_FIELD, "file not found (expected a YAML file)")]
    except IsADirectoryError:
        return None, [LoadError(shown, 1, 1, FILE_FIELD, "is a folder (expected a YAML file)")]
    except OSError as exc:
        return None, [LoadError(shown, 1, 1, FILE_FIELD, f"cannot be read: {exc.strerror}")]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = raw[exc.start : exc.start + 1].hex()
        return None, [
            LoadError(
                shown, line, col, FILE_FIELD, f"byte 0x{bad} is not UTF-8 (expected UTF-8 text)"
            )
        ]
    if not text.strip() or all(
        not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()
    ):
        return None, [LoadError(shown, 1, 1, FILE_FIELD, "file is empty (expected a YAML mapping)")]
    return text, []


class _TooLarge(Exception):
    pass


def _read_bounded(path: Path) -> bytes:
    """The file's bytes, refusing before reading when it is over :data:`MAX_FILE_BYTES`."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise _TooLarge(
                f"file is {size} bytes (expected at most {MAX_FILE_BYTES} bytes, "
                f"{MAX_FILE_BYTES // 2**20} MiB)"
            )
        # A pipe or device reports no size: read one byte past the bound to tell.
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise _TooLarge(
            f"file is over {MAX_FILE_BYTES} bytes (expected at most {MAX_FILE_BYTES} bytes, "
            f"{MAX_FILE_BYTES // 2**20} MiB)"
        )
    return raw


def _yaml(allow_duplicates: bool = False) -> YAML:
    y = YAML(typ="rt")
    y.allow_duplicate_keys = allow_duplicates
    # Depth and alias bounds, checked before anything is expanded (see branchpoint.core.yaml_limits).
    y.Scanner = BoundedScanner
    y.Composer = BoundedComposer
    return y


def _duplicate_keys(text: str, path: str) -> list[LoadError]:
    """Every duplicate key in the document (ruamel stops at the first one)."""
    errors: list[LoadError] = []
    root = _yaml(True).compose(text)

    def walk(node: Node | None, trail: list[str | int]) -> None:
        if isinstance(node, MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, ScalarNode) else None
                if key is not None:
                    if key in seen:
                        mark = key_node.start_mark
                        errors.append(
                            LoadError(
                                path,
                                mark.line + 1,
                                mark.column + 1,
                                format_loc([*trail, key]),
                                f"duplicate key '{key}' (expected unique keys; first on line "
                                f"{seen[key]})",
                            )
                        )
                    else:
                        seen[key] = key_node.start_mark.line + 1
                walk(value_node, [*trail, key if key is not None else "?"])
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, [*trail, i])

    walk(root, [])
    return errors


def _syntax_error(exc: Exception, text: str, path: str) -> LoadError:
    """One line for a YAML error: position, the problem, a hint for unquoted templates."""
    if isinstance(exc, YAMLLimitError):
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return LoadError(path, line, col, _short_field(exc.loc), exc.message)
    if isinstance(exc, ReaderError):  # a character YAML does not allow (control characters)
        before = text[: exc.position]
        line = before.count("\n") + 1
        col = exc.position - (before.rfind("\n") + 1) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        return LoadError(
            path,
            line,
            col,
            YAML_FIELD,
            f"character {char!r} is not allowed in YAML (expected printable text)",
        )
    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        parts = [p for p in (exc.context, exc.problem) if p]
        problem = " ".join(": ".join(parts).split()) or "invalid YAML"
        lines = text.splitlines()
        hint = ""
        if 0 < line <= len(lines) and "{{" in lines[line - 1]:
            hint = '; quote values that hold templates: "{{ name }}"'
        return LoadError(path, line, col, YAML_FIELD, f"{problem}{hint} (expected valid YAML)")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return LoadError(path, 1, 1, YAML_FIELD, f"{first} (expected valid YAML)")


def _short_field(loc: tuple[str | int, ...], keep: int = 4) -> str:
    """The path of a value, cut short when deep (a too-deep value is a hundred steps down)."""
    if not loc:  # found by the scanner, which runs ahead of any path
        return YAML_FIELD
    if len(loc) <= keep:
        return format_loc(loc)
    return format_loc(loc[:keep]) + "..."


def parse_yaml(text: str, path: str | Path) -> tuple[Any, PosMap, list[LoadError]]:
    """Parse ``text``; return plain data, the position of every value, and errors.

    A text that parsed without errors before is read back from the parse cache
    (:func:`_cached_parse`): the same bytes give the same data and positions, and ruamel's
    round-trip parser, pure Python, costs most of a run's start on a big library."""
    cached = _cached_parse(text)
    if cached is not None:
        return cached[0], cached[1], []
    data, pos, errors = _parse_yaml(text, path)
    if not errors:
        _store_parse(text, data, pos)
    return data, pos, errors


# -- the parse cache -------------------------------------------------------------------------------
# One file per text that parsed cleanly, named by the sha256 of the text and of this parser's own
# code (a change to either is a miss), holding the plain data and positions in marshal's format
# (plain types only: nothing is constructed on reading). Texts with errors are never cached, so
# every error is found and worded by the parser itself. BRANCHPOINT_YAML_CACHE=0 turns it off;
# the folder is BRANCHPOINT_CACHE_DIR (or ~/.cache/branchpoint), yaml/. A cache that cannot be
# read or written costs only speed.

_MIN_CACHED = 2048  # characters: below this, parsing costs about what reading a cache file does


def _cache_file(text: str) -> Path | None:
    if os.environ.get("BRANCHPOINT_YAML_CACHE", "1") == "0" or len(text) < _MIN_CACHED:
        return None
    base = os.environ.get("BRANCHPOINT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "branchpoint"
    )
    digest = hashlib.sha256(_parser_salt() + text.encode("utf-8", "surrogatepass")).hexdigest()
    return Path(base) / "yaml" / f"{digest}.marshal"


@functools.lru_cache(maxsize=1)
def _parser_salt() -> bytes:
    """This parser's version: its code and the limits' code, ruamel's version, Python's."""
    import ruamel.yaml

    from branchpoint.core import yaml_limits

    parts = [Path(__file__).read_bytes(), Path(yaml_limits.__file__).read_bytes()]
    parts.append(f"{ruamel.yaml.__version__}|{sys.version}|{marshal.version}".encode())
    return hashlib.sha256(b"\0".join(parts)).digest()


def _cached_parse(text: str) -> tuple[Any, PosMap] | None:
    try:
        file = _cache_file(text)
        if file is None:
            return None
        data, positions = marshal.loads(file.read_bytes())
        pos = PosMap()
        for loc, fields in positions.items():
            pos[loc] = NodePos(*fields)
        return data, pos
    except Exception:  # missing, unreadable, from another layout: parse as if never cached
        return None


def _store_parse(text: str, data: Any, pos: PosMap) -> None:
    try:
        file = _cache_file(text)
        if file is None:
            return
        positions = {
            loc: (n.line, n.col, n.key_line, n.key_col, n.container, n.field)
            for loc, n in pos.items()
        }
        blob = marshal.dumps((data, positions))  # ValueError on a type marshal lacks: no cache
        if marshal.loads(blob) != (data, positions):
            return  # not a faithful copy (a subclass of a plain type): parse every time
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, file)  # whole or absent: a reader never sees half a file
    except Exception:
        return


def _parse_yaml(text: str, path: str | Path) -> tuple[Any, PosMap, list[LoadError]]:
    shown = str(path)
    errors: list[LoadError] = []
    try:
        try:
            doc = _yaml().load(text)
        except DuplicateKeyError:
            # Report every duplicate, then go on with the first value of each key so that the
            # rest of the file is still checked.
            errors = _duplicate_keys(text, shown)
            doc = _yaml(True).load(text)
    except YAMLError as exc:
        return None, PosMap(), [_syntax_error(exc, text, shown)]
    if doc is None:
        return (
            None,
            PosMap(),
            [LoadError(shown, 1, 1, FILE_FIELD, "file is empty (expected a YAML mapping)")],
        )
    pos = PosMap()
    line, col = _root_mark(doc)
    pos[()] = NodePos(line, col, line, col, isinstance(doc, (CommentedMap, CommentedSeq)), "")
    data = _plain(doc, (), pos, shown, errors)
    return data, pos, errors


def _root_mark(doc: Any) -> tuple[int, int]:
    lc = getattr(doc, "lc", None)
    if lc is not None and lc.line is not None:
        return lc.line + 1, lc.col + 1
    return 1, 1


def _plain(value: Any, loc: Loc, pos: PosMap, path: str, errors: list[LoadError]) -> Any:
    """Round-trip objects -> plain dict/list/str/int/float/bool/None, recording positions."""
    if isinstance(value, TaggedScalar) and not _custom_tag(value):
        return str(value.value)  # e.g. ``!!str 3``
    if isinstance(value, TaggedScalar) or _custom_tag(value):
        here = pos.get(loc, NodePos(1, 1, 1, 1, False, ""))
        tag = str(getattr(getattr(value, "tag", None), "value", None) or "?")
        tag = tag.replace("tag:yaml.org,2002:", "!!")
        errors.append(
            LoadError(
                path,
                here.line,
                here.col,
                here.field or ROOT_FIELD,
                f"YAML tag {tag} is not allowed (expected plain values: text, numbers, lists, mappings)",
            )
        )
        return _INVALID
    if isinstance(value, CommentedMap):
        out: dict[Any, Any] = {}
        here = pos.get(loc, NodePos(1, 1, 1, 1, True, ""))
        for key, child in value.items():
            if key in value.lc.data:
                k_line, k_col = value.lc.key(key)
                v_line, v_col = value.lc.value(key)
            else:  # merged in with ``<<: *anchor``: point at the mapping that merges it
                k_line = v_line = here.key_line - 1
                k_col = v_col = here.key_col - 1
            if key is not None and not isinstance(key, (str, int, float, bool)):
                # ``text: {{ name }}`` parses as a mapping whose key is a mapping.
                looks_like_template = isinstance(key, (dict, CommentedKeyMap))
                errors.append(
                    LoadError(
                        path,
                        here.key_line,
                        here.key_col,
                        here.field or ROOT_FIELD,
                        'looks like an unquoted template (expected a quoted string: "{{ name }}")'
                        if looks_like_template
                        else "has a key that is a list or mapping (expected plain text keys)",
                    )
                )
                return _INVALID
            child_loc = (*loc, key)
            pos[child_loc] = NodePos(
                v_line + 1,
                v_col + 1,
                k_line + 1,
                k_col + 1,
                isinstance(child, (CommentedMap, CommentedSeq)),
                format_loc(child_loc),
            )
            out[_plain_scalar_key(key)] = _plain(child, child_loc, pos, path, errors)
        return out
    if isinstance(value, CommentedSeq):
        items: list[Any] = []
        for i, child in enumerate(value):
            item_pos = value.lc.item(i) if value.lc.data else None
            if item_pos is None:  # no marks (e.g. under a rejected tag): use the list's own
                parent = pos.get(loc, NodePos(1, 1, 1, 1, True, ""))
                line, col = parent.line - 1, parent.col - 1
            else:
                line, col = item_pos
            child_loc = (*loc, i)
            pos[child_loc] = NodePos(
                line + 1,
                col + 1,
                line + 1,
                col + 1,
                isinstance(child, (CommentedMap, CommentedSeq)),
                format_loc(child_loc),
            )
            items.append(_plain(child, child_loc, pos, path, errors))
        return items
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, ScalarBoolean):  # a boolean with an anchor
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (date, datetime)):
        return value  # pydantic reports "expected a string" with the right position
    return value


_PLAIN_TAGS = frozenset(
    "tag:yaml.org,2002:" + t
    for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "omap", "set")
)


def _custom_tag(value: Any) -> bool:
    """True for any explicit tag other than the plain YAML types (``!!python/...``, ``!foo``)."""
    tag = getattr(value, "tag", None)
    name = getattr(tag, "value", None)
    return bool(name) and str(name) not in _PLAIN_TAGS


def _plain_scalar_key(key: Any) -> Any:
    if isinstance(key, bool) or key is None:
        return key
    if isinstance(key, int):
        return int(key)
    if isinstance(key, float):
        return float(key)
    return str(key)


class _Marker:
    """Stands in for a value that already has an error, so validation does not report it twice."""

    def __repr__(self) -> str:
        return "<invalid>"


_INVALID: Any = _Marker()


def read_yaml(path: str | Path) -> tuple[Any, PosMap, list[LoadError]]:
    """Read and parse one file: ``(data | None, positions, errors)``."""
    text, errors = read_text(path)
    if text is None:
        return None, PosMap(), errors
    return parse_yaml(text, path)


# --------------------------------------------------------------------------------------------
# validation


def error_at(
    pos: PosMap, loc: Loc, path: str, message: str, *, at_key: bool | None = None
) -> LoadError:
    """A :class:`LoadError` for the value at ``loc`` (or its nearest known ancestor)."""
    found, node = pos.nearest(loc)
    missing = loc[len(found) :]
    key = node.container if at_key is None else at_key
    line, col = (node.key_line, node.key_col) if key else (node.line, node.col)
    if node.field or found:
        field = node.field + ("" if not missing else _suffix(node.field, missing))
    else:
        field = format_loc(loc) or ROOT_FIELD
    return LoadError(path, line, col, field or ROOT_FIELD, message)


def _suffix(prefix: str, rest: Loc) -> str:
    tail = format_loc(rest)
    if not prefix:
        return tail
    return tail if tail.startswith("[") else "." + tail


def validate_data(
    data: Any,
    pos: PosMap,
    model_cls: type[M],
    path: str | Path,
    *,
    context: dict[str, Any] | None = None,
) -> tuple[M | None, list[LoadError]]:
    """Validate already-parsed ``data`` against ``model_cls``; errors carry positions from ``pos``."""
    shown = str(path)
    if data is _INVALID:  # already reported by the parser
        return None, []
    if not isinstance(data, dict):
        _, root = pos.nearest(())
        return None, [
            LoadError(
                shown,
                root.line,
                root.col,
                ROOT_FIELD,
                f"the document is {_describe_value(data)} (expected a mapping of "
                f"{_model_noun(model_cls)} keys)",
            )
        ]
    try:
        return model_cls.model_validate(data, context=context), []
    except ValidationError as exc:
        return None, pydantic_errors(exc, pos, model_cls, shown, data)


def pydantic_errors(
    exc: ValidationError, pos: PosMap, model_cls: type[BaseModel], path: str, data: Any = None
) -> list[LoadError]:
    out: list[LoadError] = []
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err["loc"])
        if _input_is_marker(err.get("input")):
            continue
        ctx = err.get("ctx") or {}
        cause = ctx.get("error")
        sub = getattr(cause, "field_loc", None)
        if sub:  # a model validator that knows which field is wrong (see FieldProblem)
            loc = (*loc, *sub)
        out.append(_one_error(err["type"], loc, err, pos, model_cls, path))
    return sorted(set(out), key=lambda e: (e.line, e.col, e.field, e.message))


def _input_is_marker(value: Any) -> bool:
    return value is _INVALID


def compiling_regexes(values: list[str]) -> list[str]:
    """A field validator for a list of regexes (rubric and persona-rubric rules): each one that
    does not compile is a problem at its own index."""
    import re

    for i, pattern in enumerate(values):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FieldProblem(
                (i,), f"regex {pattern!r} does not compile: {exc} (expected a Python regex)"
            ) from None
    return values


def _one_error(
    kind: str, loc: Loc, err: Any, pos: PosMap, model_cls: type[BaseModel], path: str
) -> LoadError:
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if loc and loc[-1] == "[key]":  # a mapping key of the wrong type
        loc = loc[:-1]
        return error_at(
            pos, loc, path, f"key {value!r} is not valid (expected a text key)", at_key=True
        )
    expected = expected_for(model_cls, loc)
    exp = f" (expected {expected})" if expected else ""
    if kind == "missing":
        parent = loc[:-1]
        ploc, _ = pos.nearest(parent)
        base = error_at(pos, ploc, path, "", at_key=True)
        return LoadError(
            path,
            base.line,
            base.col,
            format_loc(_display_loc(pos, loc)),
            f"required field is missing{exp}",
        )
    if kind == "extra_forbidden":
        key = loc[-1]
        allowed = allowed_keys(model_cls, loc[:-1])
        close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
        if close:
            msg = f"unknown key '{key}' (did you mean '{close[0]}'?)"
        else:
            msg = f"unknown key '{key}' (expected one of: {', '.join(allowed)})"
        return error_at(pos, loc, path, msg, at_key=True)
    if kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error") or err.get("msg", ""))
        if not text.strip():
            text = err.get("msg", "invalid value")
        return error_at(pos, loc, path, text)
    if kind == "string_pattern_mismatch":
        return error_at(pos, loc, path, f"{_describe_value(value)} is not a valid id{exp}")
    if kind in ("greater_than_equal", "greater_than"):
        return error_at(pos, loc, path, f"{_describe_value(value)} is too small{exp}")
    if kind in ("less_than_equal", "less_than"):
        return error_at(pos, loc, path, f"{_describe_value(value)} is too large{exp}")
    if kind == "string_too_short":
        return error_at(pos, loc, path, f"is empty{exp}")
    if kind == "too_short":
        n = ctx.get("actual_length")
        return error_at(
            pos,
            loc,
            path,
            f"has {n} entr{'y' if n == 1 else 'ies'} (expected at least {ctx.get('min_length')})",
        )
    if kind == "literal_error":
        return error_at(
            pos,
            loc,
            path,
            f"{_describe_value(value)} is not allowed (expected {ctx.get('expected')})",
        )
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return error_at(
            pos,
            loc,
            path,
            f"got {_describe_value(value)}{exp or ' (expected a mapping)'}",
            at_key=True,
        )
    if kind.endswith("_type") or kind.endswith("_parsing") or kind == "list_type":
        return error_at(pos, loc, path, f"got {_describe_value(value)}{exp}")
    return error_at(pos, loc, path, f"{err.get('msg', 'invalid value')}{exp}")


def _display_loc(pos: PosMap, loc: Loc) -> Loc:
    """Path of ``loc`` as written in the file (set files map items onto their place)."""
    found, node = pos.nearest(loc)
    if not found and not node.field:
        return loc
    prefix = node.field
    rest = format_loc(loc[len(found) :])
    return (prefix + ("" if rest.startswith("[") or not rest else ".") + rest,) if prefix else loc


def _describe_value(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        short = value if len(value) <= 40 else value[:37] + "..."
        return repr(short) if value else "an empty text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (date, datetime)):
        return f"the date {value.isoformat()}"
    return type(value).__name__


# --------------------------------------------------------------------------------------------
# what a field expects, in words


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """Strip Annotated and Optional; return the bare type and annotation metadata."""
    meta: list[Any] = []
    while True:
        origin = get_origin(tp)
        if origin is typing.Annotated:
            tp, *extra = get_args(tp)
            meta.extend(extra)
            continue
        if origin in (typing.Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp, meta


def _walk(model_cls: type[BaseModel], loc: Loc) -> tuple[Any, list[Any]] | None:
    """The annotation (and constraints) of the field at ``loc``, following models, dicts, lists."""
    tp: Any = model_cls
    meta: list[Any] = []
    for part in loc:
        tp, _ = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp, meta = field.annotation, list(field.metadata)
            continue
        origin = get_origin(tp)
        if origin in (dict, dict) or origin is not None and origin.__name__ in ("dict", "Mapping"):
            tp, meta = get_args(tp)[1], []
            continue
        if origin in (list, tuple, set, frozenset):
            tp, meta = get_args(tp)[0], []
            continue
        return None
    inner, extra = _unwrap(tp)
    return inner, meta + extra


def allowed_keys(model_cls: type[BaseModel], loc: Loc) -> list[str]:
    walked = _walk(model_cls, loc)
    if walked and isinstance(walked[0], type) and issubclass(walked[0], BaseModel):
        return list(walked[0].model_fields)
    return []


def expected_for(model_cls: type[BaseModel], loc: Loc) -> str | None:
    walked = _walk(model_cls, loc)
    if walked is None:
        return None
    return describe_type(*walked)


def _model_noun(model_cls: type[BaseModel]) -> str:
    return model_cls.__name__.lower()


def describe_type(tp: Any, meta: Sequence[Any] = ()) -> str:
    tp, extra = _unwrap(tp)
    meta = [*meta, *extra]
    limits: dict[str, Any] = {}
    for m in meta:
        for attr in ("ge", "gt", "le", "lt", "min_length", "pattern"):
            v = getattr(m, attr, None)
            if v is not None:
                limits[attr] = v
        for sub in getattr(m, "metadata", []) or []:
            for attr in ("ge", "gt", "le", "lt", "min_length", "pattern"):
                v = getattr(sub, attr, None)
                if v is not None:
                    limits[attr] = v
    origin = get_origin(tp)
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        parts = [describe_type(a) for a in get_args(tp) if a is not type(None)]
        return " or ".join(dict.fromkeys(parts))
    if tp is bool:
        return "true or false"
    if tp is int:
        lo = limits.get("ge", limits.get("gt"))
        hi = limits.get("le", limits.get("lt"))
        if lo is not None and hi is not None:
            return f"a whole number from {lo} to {hi}"
        if lo is not None:
            return f"a whole number >= {lo}"
        return "a whole number"
    if tp is float:
        # the range, so that "0.7 is too large" says what is not (0 < alpha < 0.5)
        bounds = [f"{op} {limits[k]:g}" for k, op in
                  (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")) if k in limits]  # fmt: skip
        return "a number" + (f" {' and '.join(bounds)}" if bounds else "")
    if tp is str:
        pattern = limits.get("pattern")
        if pattern == ID_PATTERN:
            return "an id: lowercase letters, digits, '-' or '_', starting with a letter or digit"
        if pattern:
            return f"text matching {pattern}"
        return "non-empty text" if limits.get("min_length") else "text"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        required = [n for n, f in tp.model_fields.items() if f.is_required()]
        if required:
            return f"a mapping with {', '.join(required)}"
        return f"a mapping with any of {', '.join(tp.model_fields)}"
    if origin in (list, tuple, set, frozenset):
        args = get_args(tp)
        inner = describe_type(args[0]) if args else "values"
        least = limits.get("min_length")
        return f"a list{f' of at least {least}' if least else ''} (each: {inner})"
    if origin is dict:
        args = get_args(tp)
        inner = describe_type(args[1]) if len(args) == 2 else "values"
        least = limits.get("min_length")
        return f"a mapping of names to values{f' with at least {least} entries' if least else ''} (each: {inner})"
    return getattr(tp, "__name__", str(tp))


def load_model(
    path: str | Path, model_cls: type[M], *, context: dict[str, Any] | None = None
) -> tuple[M | None, list[LoadError]]:
    """Read, parse and validate one YAML file: ``(model | None, every error found)``."""
    data, pos, errors = read_yaml(path)
    if data is None:
        return None, errors
    model, more = validate_data(data, pos, model_cls, path, context=context)
    all_errors = sorted(set(errors + more), key=lambda e: (e.line, e.col, e.field, e.message))
    return (model if not all_errors else None), all_errors
