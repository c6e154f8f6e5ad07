"""Postgres NOTIFY channel names: River's ``<schema>.<topic>``, and the short names
riverboat's own topics go by where that is too long. Both the statements that notify
(dialect/_pg_common.py ``channel_sql``) and the Python that listens (the runtime's
notifier, riverboat.wait) name channels through here, so that they agree."""

from __future__ import annotations

__all__ = ["CHANNEL_MAX", "SHORT_TOPICS", "channel_name"]

# Postgres's longest channel name, in bytes (an identifier: NAMEDATALEN - 1). River
# allows schemas of up to 46 characters, which its longest topic (river_leadership)
# just fits; riverboat's "riverboat_finalized" did not past 43: with a schema of 44 to
# 46 characters every completion's notification was refused (a server ERROR and a
# warning each) and waiters only polled. Such a topic goes by its short name then, and
# only then: every other schema keeps the name earlier releases listen on.
CHANNEL_MAX = 63
SHORT_TOPICS = {"riverboat_finalized": "riverboat_fin"}


def channel_name(schema: str, topic: str) -> str:
    """The channel of ``topic`` in ``schema`` (the statements' ``channel_sql`` names
    the same)."""
    name = f"{schema}.{topic}"
    if len(name.encode()) > CHANNEL_MAX and topic in SHORT_TOPICS:
        return f"{schema}.{SHORT_TOPICS[topic]}"
    return name
