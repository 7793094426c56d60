"""The SQLite store: tables, engine, migrations and the repository."""
