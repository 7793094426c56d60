"""paramiko, imported without ``invoke``.

paramiko 5 declares ``invoke`` as a dependency and imports it at start (``paramiko.config``), and
``invoke`` brings ``unittest``, a vendored YAML parser and its own CLI machinery, resident in a
daemon that keeps them for its whole life (bench/README.md, "The daemon's memory floor"). paramiko
uses it only for the ``Match exec`` directive of an OpenSSH client configuration file, and guards
that import: without it, ``Match exec`` raises the ImportError. The watchdog never reads an SSH
configuration file (every host, port, user and key comes from the provider listing and the
watchdog's own configuration), so paramiko is imported here with ``invoke`` hidden for the duration
of that import, and nothing else changes: a later ``import invoke`` by anyone else works as usual.

Every module of the watchdog imports paramiko through this one (``from
watchdog_gpu.probe.paramiko_lean import paramiko``).
"""

from __future__ import annotations

import sys

if "paramiko" in sys.modules or "invoke" in sys.modules:
    import paramiko  # already loaded: nothing left to save
else:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # "import invoke" raises ImportError
    try:
        import paramiko
    finally:
        del sys.modules["invoke"]

__all__ = ["paramiko"]
