"""Drivers: thin adapters from a database library to riverboat's executor protocol.

A driver runs a dialect's statements, leases a connection per call and returns it at
once, runs explicit transactions, and (where the database has it) LISTEN/NOTIFY. It knows
nothing about jobs. Optional libraries are imported lazily; a missing one raises
:class:`~riverboat.errors.MissingDependencyError` naming the extra to install.
"""

from riverboat.drivers.base import (
    AsyncDriver,
    AsyncExecutor,
    Capabilities,
    Driver,
    DriverStats,
    Executor,
    Notification,
)

__all__ = [
    "AsyncDriver",
    "AsyncExecutor",
    "Capabilities",
    "Driver",
    "DriverStats",
    "Executor",
    "Notification",
]
