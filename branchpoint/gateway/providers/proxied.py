"""The proxy route of ``oai:``: HTTP_PROXY / HTTPS_PROXY / NO_PROXY, as common HTTP clients read them.

The lean client (``http1.py``) speaks only to the server itself. When the environment names a
proxy for a server's scheme and NO_PROXY does not exempt its host, ``oai:`` sends that server's
requests through aiohttp instead, which speaks the proxy's protocols: the absolute-form request
for ``http://`` servers, a ``CONNECT`` tunnel for ``https://`` ones, credentials in the proxy's URL.
The variables are read as the standard library reads them (``urllib.request``, as requests and
httpx do): either case, ``NO_PROXY`` a comma-separated list of hosts, domain suffixes or ``*``.
A proxy changes the route, not the answer, so it is no part of a call's cache key.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

from branchpoint.gateway.providers.http1 import Response

if TYPE_CHECKING:
    import aiohttp


def proxy_for(url: str) -> str | None:
    """The proxy URL the environment gives for ``url``, or None (no proxy, or NO_PROXY exempts it)."""
    parts = urlsplit(url)
    proxies = getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    if proxy_bypass_environment(host, proxies):
        return None
    # "proxy.lab:3128" without a scheme means an http proxy, as requests and curl read it
    return proxy if "://" in proxy else f"http://{proxy}"


class ProxiedClient:
    """POSTs through a proxy with aiohttp; the same ``Response`` as the lean client's. One session
    per event loop, as the lean client keeps one connection pool per loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp  # only where a proxy is set: its import is not paid by every sweep

        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            # trust_env=False: the proxy is chosen here, once, by proxy_for; aiohttp would
            # otherwise also read ~/.netrc and the variables again on every request
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit), trust_env=False
            )
            self._loop = loop
        return self._session

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], proxy: str | None
    ) -> Response:
        import aiohttp

        try:
            async with self._client().post(url, data=body, headers=headers, proxy=proxy) as r:
                raw = await r.read()
                return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, raw)
        except aiohttp.ClientError as exc:
            # the caller maps OSErrors to retryable model errors, as for the lean client
            raise ConnectionError(f"{type(exc).__name__} through the proxy: {exc}") from None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
