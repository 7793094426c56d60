"""``watchdog-gpu doctor``: a read-only check of the configured accounts (see ``check``)."""
