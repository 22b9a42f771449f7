"""Binding an aiohttp application: shared by the validation server and the fault proxy."""

from __future__ import annotations

from aiohttp import web


async def listen(app: web.Application, host: str, port: int, **runner_options) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on ``host:port`` (``port=0`` picks a free one), without an access log.

    Args:
        app: the application.
        host, port: the address to bind.
        runner_options: further :class:`aiohttp.web.AppRunner` options (``shutdown_timeout``...).

    Returns:
        The runner (``await runner.cleanup()`` stops serving) and the base URL
        ``http://host:port/v1`` (an IPv6 host in brackets).

    Raises:
        OSError: the address cannot be bound.
    """
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound, port = runner.addresses[0][:2]
    shown = f"[{bound}]" if ":" in bound else bound
    return runner, f"http://{shown}:{port}/v1"
