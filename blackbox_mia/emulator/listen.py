"""Binding an aiohttp application: shared by the validation server and the fault proxy."""

from __future__ import annotations

import errno
import socket

import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger

from ..types import BlackboxMIAError


def bind_error(host: str, port: int, exc: OSError) -> BlackboxMIAError:
    """The user-facing error for an address that cannot be bound: what failed and what to do.

    Args:
        host, port: the address.
        exc: the error of the failed bind.

    Returns:
        ``"cannot listen on 127.0.0.1:8000: the port is in use (another server?); choose
        another port, or port 0 for a free one"`` and the like (the permission and unknown-host
        cases named too).
    """
    reason = {
        errno.EADDRINUSE: "the port is in use (another server?); choose another port, or port 0 for a free one",
        errno.EACCES: "permission denied (ports below 1024 need privileges); choose a port >= 1024",
        errno.EADDRNOTAVAIL: "this machine has no such address; use 127.0.0.1 or one of its interfaces",
    }.get(exc.errno, exc.strerror or str(exc))
    return BlackboxMIAError(f"cannot listen on {host}:{port}: {reason}")


def check_bindable(host: str, port: int) -> None:
    """Fail now, before a model is loaded for minutes, when ``host:port`` cannot be bound.

    Binds a socket the way the server will (``SO_REUSEADDR``, as asyncio's ``create_server`` on
    POSIX) and closes it at once; another process may still take the port in between, which the
    later bind reports in the same words (:func:`listen`). Port 0 always passes.

    Raises:
        BlackboxMIAError: the port is in use, privileged, or the host is not an address of this
            machine (:func:`bind_error`).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BlackboxMIAError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})") from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise bind_error(host, port, exc) from exc


class OneLineBadRequests(logging.LoggerAdapter):
    """aiohttp's server logger, except that a request aiohttp could not parse (a negative
    ``Content-Length``, a bad header line: the client gets 400 and the server carries on) is one
    warning line, not a traceback; every other error keeps its traceback."""

    def exception(self, msg, *args, exc_info=True, **kwargs):
        """Log ``msg`` (aiohttp: "Error handling request from %s") with a traceback, or as one
        line naming the client's mistake when ``exc_info`` is an :class:`HttpProcessingError`."""
        if isinstance(exc_info, HttpProcessingError):
            detail = " ".join(str(exc_info.message or exc_info).split())
            self.warning(f"{msg}: malformed request, answered {exc_info.code} ({detail})", *args, **kwargs)
        else:
            self.error(msg, *args, exc_info=exc_info, **kwargs)


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
        BlackboxMIAError: the address cannot be bound (in use, privileged, not of this machine:
            :func:`bind_error`).
    """
    runner = web.AppRunner(app, access_log=None, logger=OneLineBadRequests(server_logger, {}), **runner_options)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise bind_error(host, port, exc) from exc
    except BaseException:
        await runner.cleanup()
        raise
    bound, port = runner.addresses[0][:2]
    shown = f"[{bound}]" if ":" in bound else bound
    return runner, f"http://{shown}:{port}/v1"
