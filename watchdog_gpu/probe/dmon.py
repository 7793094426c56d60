"""Pure GPU-sample parsing and verdicts (filled in by the probe work)."""
