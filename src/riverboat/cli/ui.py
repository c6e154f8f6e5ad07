"""``riverboat ui``: serve the web dashboard (riverboat.ui) with uvicorn.

Binds to 127.0.0.1 by default. Bound anywhere else without ``--token``, anyone who can
reach the port can retry, cancel and delete jobs, so it says so loudly on stderr.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading

from riverboat._json import check_text_param
from riverboat.cli._arguments import integer
from riverboat.cli._database import add_database_options, checked_driver, database_url
from riverboat.dialect.base import validate_schema_name
from riverboat.errors import InvalidInputError, install_hint

__all__ = ["add_arguments", "run"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_ANY_ADDRESS = ("0.0.0.0", "::", "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=integer, default=8080, help="port (default 8080; 0: any free port)"
    )
    parser.add_argument(
        "--read-only", action="store_true", help="hide every action and refuse its POST"
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        default=None,
        help="require this token (Bearer, or as the HTTP Basic password; default: "
        "$RIVERBOAT_UI_TOKEN)",
    )
    parser.add_argument(
        "--allowed-host",
        metavar="NAME",
        action="append",
        default=[],
        help="also answer requests for this Host name (repeatable; '.example.com' for a "
        "domain and its subdomains, '*' for any; default: localhost names and --host)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from riverboat.ui import create_app
    except ImportError as exc:
        raise InvalidInputError(
            "ui", f"needs the ui extra: {install_hint('ui')} ({exc.name} is missing)"
        ) from None
    url = database_url(args)
    if not args.host.strip():
        raise InvalidInputError("--host", "must not be empty")
    check_text_param(args.host, "--host")
    if args.token is not None and not args.token.strip():
        # Often an unset variable ("--token $TOKEN"): refused, not read as "no token".
        raise InvalidInputError("--token", "must not be empty")
    token = args.token or os.environ.get("RIVERBOAT_UI_TOKEN") or None
    _check_database(url, args.schema)
    if args.host not in _LOOPBACK and token is None:
        print(
            f"riverboat ui: WARNING: listening on {args.host} with no --token: anyone who "
            "can reach this port can see every job"
            + ("" if args.read_only else " and retry, cancel or delete them"),
            file=sys.stderr,
        )
    allowed = allowed_hosts(args.host, args.allowed_host)
    if args.host in _ANY_ADDRESS and not args.allowed_host:
        print(
            f"riverboat ui: listening on every address, but only requests for "
            f"{', '.join(allowed)} are answered: pass --allowed-host NAME for the name "
            "browsers use to reach this machine",
            file=sys.stderr,
        )
    app = create_app(
        url,
        schema=validate_schema_name(args.schema),
        read_only=args.read_only,
        token=token,
        allowed_hosts=allowed,
    )
    sock, listening = _listen(args.host, args.port)
    # Bound before announcing: once the URL is printed, connections wait in the backlog
    # until uvicorn accepts them (scripts and tests can rely on the line).
    print(f"riverboat ui: {listening}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0


def allowed_hosts(bound: str, extra: list[str]) -> tuple[str, ...]:
    """The Host names the served dashboard answers: localhost names, the address it is
    bound to (unless that is every address) and the ``--allowed-host`` values."""
    from riverboat.ui.app import LOCAL_HOSTS

    names = list(LOCAL_HOSTS)
    if bound not in _ANY_ADDRESS:
        names.append(bound)
    for name in extra:
        if not name.strip():
            raise InvalidInputError("--allowed-host", "must not be empty")
        names.append(name.strip())
    return tuple(dict.fromkeys(names))


def _listen(host: str, port: int) -> tuple[socket.socket, str]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OverflowError:  # outside 0-65535: socket's own wording, as a traceback
        sock.close()
        raise InvalidInputError("port", "must be 0 to 65535 (0: any free port)") from None
    except OSError as exc:
        sock.close()
        raise InvalidInputError("port", f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(128)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{sock.getsockname()[1]}/"


def serve_in_thread(database_url: str, host: str, port: int) -> tuple[str, threading.Event]:
    """Serve the dashboard from a daemon thread (``riverboat demo --ui``); returns its URL
    and an event: set it to stop the server."""
    try:
        import uvicorn

        from riverboat.ui import create_app
    except ImportError as exc:
        raise InvalidInputError(
            "ui", f"needs the ui extra: {install_hint('ui')} ({exc.name} is missing)"
        ) from None
    sock, url = _listen(host, port)
    app = create_app(database_url, allowed_hosts=allowed_hosts(host, []))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    stop = threading.Event()

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    def watch() -> None:
        stop.wait()
        server.should_exit = True

    threading.Thread(target=serve, name="riverboat-ui", daemon=True).start()
    threading.Thread(target=watch, name="riverboat-ui-stop", daemon=True).start()
    return url, stop


def _check_database(url: str, schema: str | None) -> None:
    """Refuse a bad URL or a schema riverboat cannot read before the server starts."""
    with checked_driver(url, schema):
        pass
