"""AutoSkill's tables in the run store, as the plugin's own numbered migrations (hook
``register_migrations``, recorded under the key ``autoskill``): retrievals and their per-skill
decisions, served conversations, and skill-bank events. A released migration is never edited."""
from __future__ import annotations

from typing import Callable


def m001_tables(con) -> None:
    """IF NOT EXISTS: before the plugin had migrations, the core's migration 2 made these same
    tables, and a store it made must keep its rows."""
    con.execute("""
    CREATE TABLE IF NOT EXISTS autoskill_retrievals (
        retrieval_id VARCHAR PRIMARY KEY,
        scope VARCHAR,
        source VARCHAR,
        ref VARCHAR,
        query VARCHAR,
        injected JSON,
        decisions JSON,
        latency_s DOUBLE,
        created_at TIMESTAMP NOT NULL
    )""")
    # One row per skill a retrieval scored: per-skill counts and with/without scores are a GROUP BY.
    con.execute("""
    CREATE TABLE IF NOT EXISTS autoskill_usage (
        retrieval_id VARCHAR NOT NULL,
        scope VARCHAR,
        ref VARCHAR,
        skill VARCHAR NOT NULL,
        retrieved BOOLEAN,
        injected BOOLEAN,
        rel DOUBLE,
        created_at TIMESTAMP NOT NULL
    )""")
    con.execute("""
    CREATE TABLE IF NOT EXISTS autoskill_conversations (
        conversation_id VARCHAR PRIMARY KEY,
        thread_id VARCHAR,
        scope VARCHAR,
        model VARCHAR,
        messages JSON,
        response VARCHAR,
        query VARCHAR,
        injected JSON,
        latency_s DOUBLE,
        feedback DOUBLE,
        created_at TIMESTAMP NOT NULL
    )""")
    con.execute("""
    CREATE TABLE IF NOT EXISTS autoskill_events (
        scope VARCHAR,
        action VARCHAR NOT NULL,
        skill VARCHAR,
        version VARCHAR,
        "commit" VARCHAR,
        evidence JSON,
        reason VARCHAR,
        detail JSON,
        created_at TIMESTAMP NOT NULL
    )""")


MIGRATIONS: list[Callable] = [m001_tables]
