"""paramiko without ``invoke`` (``probe/paramiko_lean.py``): the daemon's import chain loads
paramiko but neither ``invoke`` nor what it drags in, and leaves ``invoke`` importable."""

from __future__ import annotations

import json

from tests.support.interpreter import run_fresh

LOADED = """
import json, sys
{imports}
print(json.dumps({{name: name in sys.modules for name in ("paramiko", "invoke", "unittest")}}))
"""


def loaded_after(imports: str) -> dict[str, bool]:
    return dict(json.loads(run_fresh(LOADED.format(imports=imports)).stdout))


def test_the_daemon_and_the_ssh_probe_load_paramiko_without_invoke() -> None:
    loaded = loaded_after(
        "import watchdog_gpu.wiring, watchdog_gpu.daemon\n"
        "from watchdog_gpu.probe import ssh, streams, channel, sshkeys"
    )
    assert loaded == {"paramiko": True, "invoke": False, "unittest": False}


def test_plain_paramiko_would_load_invoke() -> None:
    # What the lean import saves: without it, importing paramiko loads invoke and unittest.
    assert loaded_after("import paramiko") == {"paramiko": True, "invoke": True, "unittest": True}


def test_invoke_stays_importable_and_paramiko_works_without_it() -> None:
    script = """
from watchdog_gpu.probe.paramiko_lean import paramiko
import paramiko.config
import invoke  # hidden only while paramiko was imported
assert paramiko.config.invoke is None
client = paramiko.SSHClient()
client.set_missing_host_key_policy(paramiko.RejectPolicy())
client.close()
print(invoke.__name__)
"""
    assert run_fresh(script).stdout.strip() == "invoke"


def test_a_paramiko_already_loaded_is_used_as_it_is() -> None:
    script = """
import paramiko, paramiko.config
from watchdog_gpu.probe.paramiko_lean import paramiko as lean
assert lean is paramiko
assert paramiko.config.invoke is not None
print("same")
"""
    assert run_fresh(script).stdout.strip() == "same"
