"""Drive the official ``vastai`` SDK (run with the vastai venv's python, never the project's).

Usage: vastai_driver.py ACTION [ID]; the server comes from ``VAST_URL`` and the key from
``VAST_API_KEY``, exactly as a user of the SDK would set them. Prints one JSON document:
the SDK's own return value.
"""

import json
import sys

from vastai import VastAI  # type: ignore[import-not-found]  # lives in its own venv


def main() -> None:
    action = sys.argv[1]
    sdk = VastAI()  # key from VAST_API_KEY, server from VAST_URL
    if action == "list":
        result = sdk.show_instances()
    elif action == "show":
        result = sdk.show_instance(int(sys.argv[2]))
    elif action == "stop":
        result = sdk.stop_instance(int(sys.argv[2]))
    elif action == "destroy":
        result = sdk.destroy_instance(int(sys.argv[2]))
    elif action == "user":
        result = sdk.show_user()
    elif action == "ssh-keys":
        result = sdk.show_ssh_keys()
    else:
        raise SystemExit(f"unknown action {action}")
    print(json.dumps(result, default=str))


main()
