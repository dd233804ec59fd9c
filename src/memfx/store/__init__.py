"""The results store: `store.open_store` (SQLite or PostgreSQL), the SQLite
file (sqlite.py), the PostgreSQL fleet store (postgres.py), what both share
(sql.py), file helpers (files.py) and the export schema (schema.py).

May import the model and the lab; never an experiment (the package hands
the schema its lookup of parameter declarations)."""
