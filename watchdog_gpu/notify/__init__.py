"""Notifications: pure rendering (``render``) and Apprise delivery from the outbox (``delivery``).

This package module imports nothing on purpose: the pure planner imports
``watchdog_gpu.notify.render`` and must not pull Apprise in through here (import-linter checks it).
"""
