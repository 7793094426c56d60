"""Spend accounting from recorded state spans (pure)."""
