"""The pure planner (filled in by the safety-core work)."""
