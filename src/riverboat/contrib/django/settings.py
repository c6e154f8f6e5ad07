"""``settings.RIVERBOAT``, and the clients and drivers built from it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from riverboat._imports import import_attribute
from riverboat.client import Client
from riverboat.drivers.django import DjangoDriver
from riverboat.errors import InvalidInputError
from riverboat.runtime.producer import QueueConfig

__all__ = [
    "RiverboatSettings",
    "get_client",
    "get_driver",
    "get_settings",
    "load_object",
]

_KEYS = frozenset(
    {"DATABASE_ALIAS", "SCHEMA", "QUEUES", "WORKERS", "CLIENT_OPTIONS", "CLOSE_CONNECTIONS", "UI"}
)


@dataclass(frozen=True, slots=True)
class RiverboatSettings:
    database_alias: str = "default"
    schema: str | None = None
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    workers: str | None = None
    client_options: dict[str, Any] = field(default_factory=dict)
    close_connections: Literal["obsolete", "always"] = "obsolete"
    # The dashboard's options, validated by riverboat.contrib.django.ui when it is used.
    ui: Mapping[str, Any] = field(default_factory=dict)


def _queue_config(name: str, value: object) -> QueueConfig:
    if isinstance(value, QueueConfig):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return QueueConfig(max_workers=value)
    if isinstance(value, Mapping):
        try:
            return QueueConfig(**value)
        except TypeError as exc:
            raise InvalidInputError(f"RIVERBOAT['QUEUES'][{name!r}]", str(exc)) from None
    raise InvalidInputError(
        f"RIVERBOAT['QUEUES'][{name!r}]",
        "must be a dict of QueueConfig fields, an int or a QueueConfig",
    )


def get_settings() -> RiverboatSettings:
    """``settings.RIVERBOAT`` read now (so ``override_settings`` applies), validated."""
    from django.conf import settings

    raw = getattr(settings, "RIVERBOAT", None) or {}
    if not isinstance(raw, Mapping):
        raise InvalidInputError("RIVERBOAT", "must be a dict")
    unknown = set(raw) - _KEYS
    if unknown:
        raise InvalidInputError("RIVERBOAT", f"unknown keys {sorted(unknown)}")
    queues_raw = raw.get("QUEUES") or {"default": {}}
    # A list here (QUEUES = ["default", "mail"]) was a ValueError from dict().
    for key, value, what in (
        (
            "QUEUES",
            queues_raw,
            "a dict of queue name to QueueConfig fields, an int or a QueueConfig",
        ),
        ("CLIENT_OPTIONS", raw.get("CLIENT_OPTIONS") or {}, "a dict of AsyncClient options"),
    ):
        if not isinstance(value, Mapping):
            raise InvalidInputError(f"RIVERBOAT[{key!r}]", f"must be {what}")
    for key in ("WORKERS", "SCHEMA"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise InvalidInputError(f"RIVERBOAT[{key!r}]", "must be a str")
    close = raw.get("CLOSE_CONNECTIONS", "obsolete")
    if close not in ("obsolete", "always"):
        raise InvalidInputError("RIVERBOAT['CLOSE_CONNECTIONS']", "must be 'obsolete' or 'always'")
    return RiverboatSettings(
        database_alias=raw.get("DATABASE_ALIAS", "default"),
        schema=raw.get("SCHEMA"),
        queues={name: _queue_config(name, v) for name, v in dict(queues_raw).items()},
        workers=raw.get("WORKERS"),
        client_options=dict(raw.get("CLIENT_OPTIONS") or {}),
        close_connections=close,
        ui=raw.get("UI") or {},
    )


_lock = threading.Lock()
_clients: dict[tuple[str, str | None], Client] = {}


def get_driver(alias: str | None = None, schema: str | None = None) -> DjangoDriver:
    """A :class:`DjangoDriver` for ``alias`` (default: the configured one)."""
    conf = get_settings()
    return DjangoDriver(alias or conf.database_alias, schema if schema is not None else conf.schema)


def get_client(alias: str | None = None, schema: str | None = None) -> Client:
    """The insert-only client on Django's connection; one per (alias, schema).

    Its inserts run on the calling thread's Django connection, so inside
    ``transaction.atomic()`` they commit or roll back with the surrounding rows.
    """
    conf = get_settings()
    key = (alias or conf.database_alias, schema if schema is not None else conf.schema)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = Client(DjangoDriver(*key), **_insert_options(conf.client_options))
            _clients[key] = client
        return client


def _insert_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: options[k] for k in ("max_attempts", "id") if k in options}


def load_object(spec: str, setting: str = "RIVERBOAT['WORKERS']") -> Any:
    """The object a ``package.module:attr`` (or ``package.module.attr``) setting names."""
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise InvalidInputError(setting, f"{spec!r} must look like package.module:attr")
    return import_attribute(module_name, attr, setting, f" (from {spec!r})")


def _reset(**kwargs: Any) -> None:
    if kwargs.get("setting") in ("RIVERBOAT", "DATABASES"):
        with _lock:
            _clients.clear()


def _connect_reset() -> None:
    from django.core.signals import setting_changed

    setting_changed.connect(_reset, dispatch_uid="riverboat-settings-reset")


_connect_reset()
