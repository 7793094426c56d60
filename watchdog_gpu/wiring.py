"""Composition root: the one module that builds the real HTTP clients, SSH runners, store,
notifiers and clock."""
