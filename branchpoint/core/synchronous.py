"""A synchronous twin of a coroutine function, with its parameters typed for checkers."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def synchronous(
    coroutine_function: Callable[P, Coroutine[Any, Any, R]], doc: str
) -> Callable[P, R]:
    """``f(...)`` = ``asyncio.run(coroutine_function(...))``, for scripts and the command line.

    Written once so that the twin keeps the async function's signature: a ``**kwargs: Any``
    wrapper would hide every parameter from a type checker (and a misspelt one until run time).
    """

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(coroutine_function(*args, **kwargs))

    # __wrapped__ (from update_wrapper) lets inspect.signature and the API docs show the parameters
    functools.update_wrapper(run, coroutine_function)
    run.__name__ = run.__qualname__ = coroutine_function.__name__.removeprefix("a")
    run.__doc__ = doc
    return run
