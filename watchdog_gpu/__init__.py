"""watchdog-gpu: stop rented GPUs from burning money, and never kill a busy one."""

import sys

__version__ = "0.1.0"

# httpx's package imports its own command-line client (``httpx._main``: click, rich, pygments,
# megabytes resident in every process that talks HTTP) whenever those happen to be installed;
# watchdog-gpu never runs that client. A None entry makes httpx take its documented fallback
# (a ``main`` that says the CLI extras are missing). Set before any module of ours imports httpx.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
