"""What the rewritten tests get where distributed's test module used distributed's own machinery.

`gen_cluster(client=True)` runs an `async def test(c, s, a, b)` with `c` an asynchronous
`scaler.compat.dask.distributed.Client` of the session's Scaler cluster (plugin.py starts it). `s`, `a`
and `b` are distributed's Scheduler and Worker objects there; a Scaler cluster has none, so the tests
chosen never touch them, and these stand-ins fail any test that does, saying why.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Coroutine, NoReturn

# distributed's gen_cluster gives a test 30 s, against a cluster in the test's own process; ours talks to
# processes on 2 cores that the rest of the test suite shares, and has as long as pytest gives each test.
TEST_TIMEOUT_SECONDS = 60
FIXED = ("c", "s", "a", "b")

_session: dict[str, Any] = {}


def set_cluster(cluster: Any) -> None:
    """The cluster that gen_cluster's clients connect to (plugin.py's, for the session)."""
    _session["cluster"] = cluster


class NotOffered:
    """A name of distributed's that scaler.compat.dask.distributed does not offer: any use fails the test."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _fail(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"{self._name} is distributed's own; scaler.compat.dask.distributed does not offer it")

    __call__ = _fail

    def __getattr__(self, attribute: str) -> NoReturn:
        self._fail()


def not_offered(name: str) -> NotOffered:
    return NotOffered(name)


def gen_cluster(client: bool = False, **options: Any) -> Callable[[Callable[..., Coroutine]], Callable[..., None]]:
    if not client or options:
        raise TypeError(f"only gen_cluster(client=True) has a stand-in, not client={client}, {options}")

    def decorate(test: Callable[..., Coroutine]) -> Callable[..., None]:
        own = [
            parameter for parameter in inspect.signature(test).parameters.values()
            if parameter.name not in FIXED and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]

        def run(**parameters: Any) -> None:
            asyncio.run(asyncio.wait_for(_with_client(test, parameters), TEST_TIMEOUT_SECONDS))

        run.__name__, run.__qualname__, run.__module__ = test.__name__, test.__qualname__, test.__module__
        run.__doc__ = test.__doc__
        run.__signature__ = inspect.Signature(own)  # type: ignore[attr-defined]  # pytest reads it for fixtures
        return run

    return decorate


async def _with_client(test: Callable[..., Coroutine], parameters: dict[str, Any]) -> None:
    from scaler.compat.dask.distributed import Client

    async with Client(_session["cluster"], asynchronous=True) as c:
        await test(c, NotOffered("distributed's Scheduler (s)"), NotOffered("distributed's Worker (a)"),
                   NotOffered("distributed's Worker (b)"), **parameters)
