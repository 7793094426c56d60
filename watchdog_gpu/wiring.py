"""Composition root: the one module that builds real HTTP clients, SSH runners, the store, notifiers and the clock."""
