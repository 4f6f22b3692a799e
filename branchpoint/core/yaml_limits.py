"""Bounds that keep a hostile YAML file from exhausting time or memory while it is read.

Scenario, rubric, prompt and set files come from people we do not have to trust. Three classic
attacks are stopped here, each with one positioned error instead of minutes of work:

* a huge file: its size is checked before any of it is read (:data:`MAX_FILE_BYTES`);
* deep nesting (``[[[[...]]]]``), which would exhaust Python's recursion in the composer and
  the constructors after it (:data:`MAX_DEPTH`);
* alias bombs ("billion laughs"): anchors nested nine deep, each aliased nine times, are a few
  hundred bytes as nodes but expand to hundreds of millions of values when the loader turns them
  into plain Python values. The composer below counts alias references
  (:data:`MAX_ALIASES`) and what they copy (:data:`MAX_ALIAS_VALUES`, :data:`MAX_ALIAS_TEXT`)
  while the node graph is built, before anything is expanded.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.scanner import RoundTripScanner

# Far above any real scenario set or rubric (the largest bundled file, a rubric, is 75 kB).
MAX_FILE_BYTES = 5 * 1024 * 1024
# Lists and mappings inside one another; real files nest fewer than ten.
MAX_DEPTH = 100
# ``*name`` references in one file; the bundled rubrics use six.
MAX_ALIASES = 1_000
# Values (scalars, lists, mappings) that aliases copy into the document, all aliases together.
MAX_ALIAS_VALUES = 100_000
# Characters of text that aliases copy: one file's worth, so a long anchored text cannot be
# multiplied a thousand times.
MAX_ALIAS_TEXT = MAX_FILE_BYTES

LocPart = str | int | None


class YAMLLimitError(MarkedYAMLError):
    """A bound was passed. ``loc`` is where in the document, ``message`` the one-line problem."""

    def __init__(self, loc: tuple[str | int, ...], message: str, mark: Any) -> None:
        super().__init__(problem=message, problem_mark=mark)
        self.loc = loc
        self.message = message


class BoundedScanner(RoundTripScanner):
    """ruamel's round-trip scanner with a bound on ``[`` and ``{`` nesting; use as ``YAML().Scanner``.

    The scanner reads up to 1024 characters ahead of the composer while a ``[`` might still turn
    out to be a key, and each step of that look-ahead visits every open flow level: ten thousand
    ``[`` on one line cost seconds before the composer sees the hundred-and-first."""

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise YAMLLimitError(
                (),
                f"'{to_push}' nested more than {MAX_DEPTH} levels deep (expected at most "
                f"{MAX_DEPTH} levels of lists and mappings)",
                self.reader.get_mark(),
            )
        super().fetch_flow_collection_start(TokenClass, to_push)


class BoundedComposer(Composer):
    """ruamel's composer with depth and alias bounds; use as ``YAML().Composer``.

    Aliases make the node graph a DAG in which one node can be reached many times; what they
    copy is counted with each node's expanded size, computed once when the node is complete, so
    the bookkeeping is linear in the file however much the aliases would expand."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self._depth = 0
        self._aliases = 0
        self._copied_values = 0
        self._copied_text = 0
        # id(node) -> (values, characters) of the node once expanded; absent while it is built.
        self._sizes: dict[int, tuple[int, int]] = {}
        self._trail: list[LocPart] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._trail.append(_part(parent, index))
        try:
            if self.parser.check_event(AliasEvent):
                event = self.parser.peek_event()
                node = super().compose_node(parent, index)
                self._count_alias(node, event)
                return node
            collection = self.parser.check_event(SequenceStartEvent, MappingStartEvent)
            if collection:
                self._depth += 1
                if self._depth > MAX_DEPTH:
                    raise YAMLLimitError(
                        self._loc(),
                        f"nested more than {MAX_DEPTH} levels deep (expected at most "
                        f"{MAX_DEPTH} levels of lists and mappings)",
                        self.parser.peek_event().start_mark,
                    )
            node = super().compose_node(parent, index)
            if collection:
                self._depth -= 1
            self._sizes[id(node)] = _size(node, self._sizes)
            return node
        finally:
            self._trail.pop()

    def _count_alias(self, node: Node, event: Any) -> None:
        name = f"*{event.anchor}"
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            raise YAMLLimitError(
                self._loc(),
                f"alias {name}: {self._aliases} alias references (expected at most "
                f"{MAX_ALIASES} per file)",
                event.start_mark,
            )
        size = self._sizes.get(id(node))
        if size is None:  # its anchor is still open: the value would contain itself
            raise YAMLLimitError(
                self._loc(),
                f"alias {name} is inside the value it refers to (expected an alias to a value "
                "defined before it)",
                event.start_mark,
            )
        self._copied_values += size[0]
        self._copied_text += size[1]
        if self._copied_values > MAX_ALIAS_VALUES:
            raise YAMLLimitError(
                self._loc(),
                f"alias {name}: aliases copy {self._copied_values} values so far (expected at "
                f"most {MAX_ALIAS_VALUES} per file)",
                event.start_mark,
            )
        if self._copied_text > MAX_ALIAS_TEXT:
            raise YAMLLimitError(
                self._loc(),
                f"alias {name}: aliases copy {self._copied_text} characters of text so far "
                f"(expected at most {MAX_ALIAS_TEXT} per file)",
                event.start_mark,
            )

    def _loc(self) -> tuple[str | int, ...]:
        return tuple(p for p in self._trail if p is not None)


def _part(parent: Any, index: Any) -> LocPart:
    """The path step of the node being composed: a list index, a mapping's key, or none."""
    if isinstance(parent, SequenceNode) and isinstance(index, int):
        return index
    if isinstance(parent, MappingNode) and isinstance(index, ScalarNode):
        return str(index.value)
    return None  # the root, a mapping key itself, or a value under a non-text key


def _size(node: Node, sizes: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(values, characters) of ``node`` fully expanded; its children are already in ``sizes``."""
    if isinstance(node, ScalarNode):
        return 1, len(str(node.value))
    children: list[Node] = []
    if isinstance(node, SequenceNode):
        children = list(node.value)
    elif isinstance(node, MappingNode):
        children = [part for pair in node.value for part in pair]
    values, text = 1, 0
    for child in children:
        v, t = sizes.get(id(child), (1, 0))
        values += v
        text += t
    return values, text
