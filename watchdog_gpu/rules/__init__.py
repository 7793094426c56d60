"""The rules: one module each, registered here by name (the TOML table name under ``[rules]``)."""
