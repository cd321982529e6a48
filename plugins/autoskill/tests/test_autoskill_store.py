"""AutoSkill's tables come from its own migration; a store made when they were core migration 2 keeps its rows."""
import duckdb

from evolver import store_schema
from evolver.store import Store
from evolver_autoskill import records
from evolver_autoskill.schema import m001_tables


def test_a_new_store_gets_the_tables_from_the_plugins_migration(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        assert store.query("SELECT plugin, id, name FROM plugin_migrations")[1] == [("autoskill", 1, "m001_tables")]
        records.log_event(store, "ana", "add", "s", "0.1.0", "c1", ["conversation:a"], "new")
        assert [e["action"] for e in records.events(store, "ana")] == ["add"]


def test_a_store_whose_core_migration_2_made_the_tables_opens_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.duckdb"
    # The store as the old code left it: core migrations 1 and 2 recorded, no plugin_migrations, and the
    # AutoSkill tables (old m002 ran the same DDL, less IF NOT EXISTS) holding a row.
    con = duckdb.connect(str(path))
    con.execute(store_schema.MIGRATIONS_TABLE)
    store_schema.m001_initial(con)
    m001_tables(con)
    con.execute("INSERT INTO migrations VALUES (1, 'm001_initial', now()), (2, 'm002_autoskill', now())")
    con.execute("INSERT INTO autoskill_events VALUES ('ana', 'add', 's', '0.1.0', 'c1', '[]', 'old', '{}', now())")
    con.close()

    with Store(path) as store:
        # every later core migration too
        assert [r[0] for r in store.query("SELECT id FROM migrations ORDER BY id")[1]] == [
            store_schema.migration_id(fn) for fn in store_schema.MIGRATIONS]
        assert store.query("SELECT plugin, id FROM plugin_migrations")[1] == [("autoskill", 1)]
        records.log_event(store, "ana", "merge", "s", "0.1.1", "c2", [], "new")
        assert [e["reason"] for e in records.events(store, "ana")] == ["old", "new"]
    with Store(path) as store:
        assert [e["reason"] for e in records.events(store, "ana")] == ["old", "new"]
