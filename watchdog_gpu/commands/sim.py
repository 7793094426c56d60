"""``watchdog-gpu sim serve [--scenario FILE] [--speed X]``: the simulated providers on loopback.

Starts one HTTP server per provider dialect (Vast REST, RunPod GraphQL, Lambda REST) over a
simulated world, prints their base URLs as ONE JSON line on stdout —
``{"vast": "http://127.0.0.1:P", "runpod": "…", "lambda": "…"}`` — and serves until SIGTERM or
SIGINT, then exits 0. Without ``--scenario`` it serves the built-in demo world
(``watchdog_gpu/sim/default_scenario.toml``). Offset 0 of the scenario is the moment the server
starts; ``--speed 60`` runs the world 60 times faster than real time (a night in ten minutes).

API keys: ``sim-<account name>`` unless the scenario gives ``api_key``. Exit 2 for an invalid
scenario (every problem listed on stderr with its dotted path).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from importlib import resources
from types import FrameType

from watchdog_gpu.cli import EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.errors import ScenarioError
from watchdog_gpu.sim.clock import AcceleratedClock
from watchdog_gpu.sim.faults import DEFAULT_STALL_SECONDS, FaultSettings
from watchdog_gpu.sim.scenario import Scenario, load_scenario, parse_scenario
from watchdog_gpu.sim.servers import start_servers
from watchdog_gpu.sim.world import SimulatedWorld

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sim serve`` to the command line."""
    sim = subparsers.add_parser(
        "sim",
        help=summary("sim"),
        description="The simulated provider world: `sim serve` serves simulated Vast, RunPod "
        "and Lambda APIs on 127.0.0.1 for trying the watchdog without a real account.",
    )
    actions = sim.add_subparsers(dest="sim_action", metavar="ACTION", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve simulated Vast/RunPod/Lambda APIs on 127.0.0.1",
        description=doc_paragraph(__doc__),
    )
    serve.add_argument("--scenario", metavar="FILE", help="scenario TOML (default: built-in)")
    serve.add_argument(
        "--speed",
        type=_positive_float,
        default=None,
        metavar="X",
        help="virtual seconds per real second (default: real time)",
    )
    serve.add_argument(
        "--stall-seconds",
        type=_positive_float,
        default=DEFAULT_STALL_SECONDS,
        metavar="S",
        help="how long an account in the 'timeout' fault stalls a request (default %(default)s)",
    )
    serve.set_defaults(handler=run_serve)


def default_scenario() -> Scenario:
    """The built-in demo world."""
    text = resources.files("watchdog_gpu.sim").joinpath("default_scenario.toml").read_text("utf-8")
    return parse_scenario(text)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; exit 0 then, 2 for an invalid scenario."""
    try:
        scenario = load_scenario(args.scenario) if args.scenario else default_scenario()
    except ScenarioError as error:
        print("invalid scenario:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    clock: Clock = AcceleratedClock(args.speed) if args.speed else SystemClock()
    world = SimulatedWorld(scenario, clock, origin=clock.now())
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {
        number: signal.signal(number, request_stop) for number in (signal.SIGTERM, signal.SIGINT)
    }
    servers = start_servers(world, faults=FaultSettings(stall_seconds=args.stall_seconds))
    try:
        print(json.dumps(servers.urls), flush=True)
        logger.info(
            "sim serving scenario=%s speed=%s accounts=%d",
            scenario.name,
            args.speed or 1,
            len(scenario.accounts),
        )
        while not stop.wait(timeout=1.0):
            pass
    finally:
        servers.stop()
        for number, handler in previous.items():
            signal.signal(number, handler)
    return EXIT_OK


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value
