"""Pure parse functions: provider payloads into the normalised model (no I/O)."""
