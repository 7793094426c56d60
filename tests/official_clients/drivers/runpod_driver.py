"""Drive the official ``runpod`` SDK (run with the runpod venv's python, never the project's).

Usage: runpod_driver.py ACTION [ID]; the server comes from ``RUNPOD_API_BASE_URL`` and the key
from ``RUNPOD_API_KEY``, as a user of the SDK would set them. Prints one JSON document: the
SDK's own return value.
"""

import json
import os
import sys

import runpod  # type: ignore[import-not-found]  # lives in its own venv


def main() -> None:
    action = sys.argv[1]
    runpod.api_key = os.environ["RUNPOD_API_KEY"]
    if action == "list":
        result = runpod.get_pods()
    elif action == "show":
        result = runpod.get_pod(sys.argv[2])
    elif action == "stop":
        result = runpod.stop_pod(sys.argv[2])
    elif action == "destroy":
        result = runpod.terminate_pod(sys.argv[2])
    elif action == "user":
        result = runpod.get_user()
    else:
        raise SystemExit(f"unknown action {action}")
    print(json.dumps(result, default=str))


main()
