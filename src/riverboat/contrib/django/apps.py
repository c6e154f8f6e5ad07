"""The Django app: installs the after-job connection hook once the app registry is ready."""

from __future__ import annotations

from django.apps import AppConfig

from riverboat.contrib.django.connections import reclaim_connections

__all__ = ["RiverboatConfig", "install_connection_hook", "uninstall_connection_hook"]


def _reclaim_obsolete() -> None:
    reclaim_connections()


def _reclaim_always() -> None:
    reclaim_connections(always=True)


def install_connection_hook(*, always: bool = False) -> None:
    """Close (or return to Django's pool) a worker thread's Django connections after
    each sync job: ``close_old_connections()`` semantics, or every one with ``always``."""
    from riverboat.runtime.threads import AFTER_SYNC_JOB

    uninstall_connection_hook()
    AFTER_SYNC_JOB.append(_reclaim_always if always else _reclaim_obsolete)


def uninstall_connection_hook() -> None:
    from riverboat.runtime.threads import AFTER_SYNC_JOB

    AFTER_SYNC_JOB[:] = [h for h in AFTER_SYNC_JOB if h not in (_reclaim_obsolete, _reclaim_always)]


class RiverboatConfig(AppConfig):  # type: ignore[misc]
    name = "riverboat.contrib.django"
    label = "riverboat"
    verbose_name = "riverboat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from riverboat.contrib.django.settings import get_settings

        install_connection_hook(always=get_settings().close_connections == "always")
