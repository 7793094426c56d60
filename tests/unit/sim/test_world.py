import threading
from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.sim.records import UnknownInstanceError, UnsupportedActionError
from watchdog_gpu.sim.scenario import parse_scenario
from watchdog_gpu.sim.world import DESTROY_DELAYS, SimulatedWorld, cents_with_and_without

START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


def world_of(accounts: str, duration: str = "48h") -> tuple[SimulatedWorld, VirtualClock]:
    scenario = parse_scenario(
        f'name = "t"\nstart = "2026-03-02T20:00:00Z"\nduration = "{duration}"\n' + accounts
    )
    clock = VirtualClock(START)
    return SimulatedWorld(scenario, clock), clock


def one_instance(
    provider: str = "vast",
    *,
    balance: float | None = None,
    events: str = '{ at = "0s", state = "running" }',
    multiplier: float = 1.0,
    interruptible: bool = False,
    instance_id: str = "1",
    storage: float = 0.10,
) -> str:
    balance_line = f"balance_usd = {balance}" if balance is not None else ""
    return f"""
[[accounts]]
name = "a"
provider = "{provider}"
{balance_line}
[[accounts.instances]]
id = "{instance_id}"
compute_usd_per_hour = 0.50
disk_gb = 72
storage_usd_per_gb_month = {storage}
stopped_storage_multiplier = {multiplier}
interruptible = {str(interruptible).lower()}
events = [{events}]
"""


# Vast divides the monthly storage price by 720 h: 72 GB × $0.10 / 720 = $0.01 per hour.
STORAGE_PER_HOUR = 0.01


def test_a_running_instance_bills_compute_and_storage_by_the_hour() -> None:
    world, clock = world_of(one_instance())
    clock.advance(timedelta(hours=3))

    assert world.spend_usd("a", "1") == pytest.approx(3 * (0.50 + STORAGE_PER_HOUR))


@pytest.mark.parametrize(
    ("provider", "starting_bills_compute"),
    [
        ("vast", False),  # loading: "GPU charges begin when status reaches running"
        ("runpod", True),  # RUNNING without a runtime: the pod is rented
        ("lambda", False),  # booting: billing begins once health checks pass
    ],
)
def test_a_starting_instance_bills_compute_as_its_provider_does(
    provider: str, starting_bills_compute: bool
) -> None:
    world, clock = world_of(
        one_instance(
            provider=provider,
            events='{ at = "0s", state = "starting" }, { at = "1h", state = "running" }',
            storage=0.0 if provider == "lambda" else 0.10,  # Lambda bills no instance storage
        )
    )
    clock.advance(timedelta(hours=2))

    storage_per_hour = world.instance("a", "1").storage_usd_per_hour  # type: ignore[union-attr]
    starting_hour = (0.50 if starting_bills_compute else 0.0) + storage_per_hour
    assert world.spend_usd("a", "1") == pytest.approx(starting_hour + 0.50 + storage_per_hour)


@pytest.mark.parametrize("state", ["paused", "stopped"])
def test_a_paused_or_stopped_instance_bills_storage_only(state: str) -> None:
    world, clock = world_of(
        one_instance(interruptible=True, events=f'{{ at = "0s", state = "{state}" }}')
    )
    clock.advance(timedelta(hours=10))

    assert world.spend_usd("a", "1") == pytest.approx(10 * STORAGE_PER_HOUR)
    view = world.instance("a", "1")
    assert view is not None
    assert view.billed_usd_per_hour == pytest.approx(STORAGE_PER_HOUR)


def test_the_stopped_multiplier_doubles_a_runpod_volume_once_stopped() -> None:
    world, clock = world_of(
        one_instance(
            "runpod",
            multiplier=2.0,
            events='{ at = "0s", state = "running" }, { at = "1h", state = "stopped" }',
            instance_id="pod1",
        )
    )
    clock.advance(timedelta(hours=3))

    running_storage = 72 * 0.10 / 730  # RunPod: per-month price over 730 h
    expected = 1 * (0.50 + running_storage) + 2 * (2 * running_storage)
    assert world.spend_usd("a", "pod1") == pytest.approx(expected)


def test_nothing_bills_before_the_first_state_or_after_gone() -> None:
    world, clock = world_of(
        one_instance(events='{ at = "1h", state = "running" }, { at = "3h", state = "gone" }')
    )
    clock.advance(timedelta(minutes=59))
    assert world.instance("a", "1") is None
    assert world.spend_usd("a", "1") == 0

    clock.advance(timedelta(hours=10))
    assert world.spend_usd("a", "1") == pytest.approx(2 * (0.50 + STORAGE_PER_HOUR))
    assert world.instance("a", "1") is None
    assert world.state("a", "1") == "gone"


def test_the_balance_falls_by_exactly_what_was_billed() -> None:
    world, clock = world_of(
        one_instance(
            balance=100.0,
            events='{ at = "0s", state = "running" }, { at = "90m", state = "stopped" }',
        )
    )
    for _ in range(7):
        clock.advance(timedelta(minutes=37, seconds=13))
        account = world.account_view("a")
        assert account.balance_usd is not None
        assert 100.0 - account.balance_usd == pytest.approx(world.spend_usd("a", "1"), abs=1e-9)
        assert account.total_spend_usd == pytest.approx(world.spend_usd("a", "1"), abs=1e-9)


def test_a_balance_centuries_from_zero_bills_normally() -> None:
    # $100,000 against a 10 GB stopped disk: zero lies past datetime.max (it once overflowed).
    scenario = one_instance(balance=100000.0, events='{ at = "0s", state = "stopped" }')
    world, clock = world_of(scenario.replace("disk_gb = 72", "disk_gb = 10"))
    clock.advance(timedelta(hours=5))

    account = world.account_view("a")
    assert account.balance_usd is not None
    assert world.spend_usd("a", "1") == pytest.approx(5 * 10 * 0.10 / 720)
    assert 100000.0 - account.balance_usd == pytest.approx(world.spend_usd("a", "1"), abs=1e-9)


def test_volumes_bill_until_deleted_and_count_against_the_balance() -> None:
    world, clock = world_of(
        """
[[accounts]]
name = "a"
provider = "vast"
balance_usd = 10.0
volumes = [{ id = "7", size_gb = 720, storage_usd_per_gb_month = 0.10 }]
"""
    )
    clock.advance(timedelta(hours=5))
    world.delete_volume("a", "7")
    clock.advance(timedelta(hours=5))

    account = world.account_view("a")
    assert account.balance_usd == pytest.approx(10.0 - 5 * 0.10)
    assert world.volumes("a") == []


def test_vast_stops_running_instances_when_the_credit_reaches_zero_and_keeps_billing_storage() -> (
    None
):
    world, clock = world_of(one_instance(balance=1.02))
    clock.advance(timedelta(hours=5))

    # $1.02 lasts exactly two hours at $0.51/h; then only the disk bills, into the negative.
    assert world.state("a", "1") == "stopped"
    assert world.spend_usd("a", "1") == pytest.approx(1.02 + 3 * STORAGE_PER_HOUR)
    account = world.account_view("a")
    assert account.balance_usd == pytest.approx(-3 * STORAGE_PER_HOUR)
    [action] = world.actions()
    assert (action.action, action.source) == ("zero_balance_stop", "provider")
    assert action.at == START + timedelta(hours=2)


def test_runpod_terminates_pods_when_the_balance_reaches_zero() -> None:
    world, clock = world_of(one_instance("runpod", balance=0.5, instance_id="pod1"))
    clock.advance(timedelta(hours=2))

    assert world.state("a", "pod1") == "gone"
    assert world.instance("a", "pod1") is None
    kinds = [action.action for action in world.actions()]
    assert kinds == ["zero_balance_terminate", "gone"]


def test_a_top_up_event_restores_the_balance_and_rearms_the_zero_balance_behaviour() -> None:
    world, clock = world_of(
        one_instance(
            balance=0.51,
            events='{ at = "0s", state = "running" }, { at = "3h", state = "running" }',
        )
        + """
[[accounts.events]]
at = "2h"
balance_usd = 10.0
[[accounts.events]]
at = "5h"
balance_usd = 0.0
"""
    )
    clock.advance(timedelta(hours=1, seconds=1))
    assert world.state("a", "1") == "stopped"

    clock.advance(timedelta(hours=3) - timedelta(seconds=1))
    assert world.state("a", "1") == "running"
    # After the top-up: one hour of storage only (2h-3h), then one hour running (3h-4h).
    assert world.account_view("a").balance_usd == pytest.approx(10.0 - STORAGE_PER_HOUR - 0.51)

    clock.advance(timedelta(hours=1))
    assert world.state("a", "1") == "stopped"
    stops = [action.at for action in world.actions() if action.action == "zero_balance_stop"]
    assert stops == [START + timedelta(hours=1), START + timedelta(hours=5)]


def test_a_destroy_stops_the_bill_at_the_call_and_lists_the_instance_until_the_delay() -> None:
    world, clock = world_of(
        one_instance("lambda", instance_id="abc", storage=0.0).replace("disk_gb = 72\n", "")
    )
    clock.advance(timedelta(hours=1))
    world.destroy("a", "abc")

    view = world.instance("a", "abc")
    assert view is not None
    assert view.destroying
    assert view.billed_usd_per_hour == 0.0
    assert world.account_view("a").spend_usd_per_hour == 0.0
    clock.advance(DESTROY_DELAYS["lambda"] - timedelta(seconds=1))
    assert world.instance("a", "abc") is not None
    assert world.spend_usd("a", "abc") == pytest.approx(0.50)
    clock.advance(timedelta(seconds=1))
    assert world.instance("a", "abc") is None
    clock.advance(timedelta(hours=5))
    assert world.spend_usd("a", "abc") == pytest.approx(0.50)


def test_a_destroy_stops_compute_and_storage_billing_at_the_call_on_vast_and_runpod() -> None:
    for provider in ("vast", "runpod"):
        world, clock = world_of(one_instance(provider, balance=100.0))
        clock.advance(timedelta(hours=2))
        world.destroy("a", "1")
        balance = world.account_view("a").balance_usd
        clock.advance(DESTROY_DELAYS[provider] / 2)
        view = world.instance("a", "1")
        assert view is not None
        assert (view.compute_billed, view.storage_usd_per_hour) == (False, 0.0), provider
        clock.advance(timedelta(hours=1))
        hourly = 0.50 + 72 * 0.10 / (720.0 if provider == "vast" else 730.0)
        assert world.spend_usd("a", "1") == pytest.approx(2 * hourly), provider
        assert world.account_view("a").balance_usd == balance, provider


def test_destroying_twice_is_accepted_and_destroying_a_gone_instance_is_not_found() -> None:
    world, clock = world_of(one_instance())
    world.destroy("a", "1")
    world.destroy("a", "1")
    clock.advance(timedelta(minutes=5))
    with pytest.raises(UnknownInstanceError):
        world.destroy("a", "1")
    with pytest.raises(UnknownInstanceError):
        world.destroy("a", "no-such-id")


def test_a_destroyed_instance_ignores_later_scripted_states() -> None:
    world, clock = world_of(
        one_instance(events='{ at = "0s", state = "running" }, { at = "2h", state = "running" }')
    )
    world.destroy("a", "1")
    clock.advance(timedelta(hours=3))
    assert world.state("a", "1") == "gone"


def test_stop_releases_the_gpu_at_once_and_lambda_cannot_stop() -> None:
    world, clock = world_of(one_instance())
    clock.advance(timedelta(hours=1))
    world.stop("a", "1")
    clock.advance(timedelta(hours=1))

    assert world.state("a", "1") == "stopped"
    assert world.spend_usd("a", "1") == pytest.approx(0.50 + 2 * STORAGE_PER_HOUR)
    assert world.gpu_state("a", "1").ssh == "down"

    lambda_world, _ = world_of(one_instance("lambda", instance_id="abc", storage=0.0))
    with pytest.raises(UnsupportedActionError):
        lambda_world.stop("a", "abc")


def test_spend_without_watchdog_replays_the_script_as_if_nobody_had_acted() -> None:
    world, clock = world_of(one_instance(), duration="12h")
    clock.advance(timedelta(hours=2))
    world.destroy("a", "1")
    clock.advance(timedelta(hours=10))

    assert world.spend_usd("a", "1") == pytest.approx(2 * (0.50 + STORAGE_PER_HOUR))
    assert world.spend_without_watchdog_usd("a", "1") == pytest.approx(
        12 * (0.50 + STORAGE_PER_HOUR)
    )


def test_gpu_state_follows_the_script_per_gpu_and_through_a_bursty_pattern() -> None:
    world, clock = world_of(
        """
[[accounts]]
name = "a"
provider = "runpod"
[[accounts.instances]]
id = "p"
gpu_count = 2
compute_usd_per_hour = 1.0
events = [
  { at = "0s", state = "running", gpu_util = [90, 0] },
  { at = "1h", gpu_pattern = { period = "10m", busy_for = "1m", util = 70 }, enc = 40 },
  { at = "2h", mig = true, ssh = "refused", interactive_login = true },
]
"""
    )
    state = world.gpu_state("a", "p")
    assert [reading.sm for reading in state.gpus] == [90, 0]
    assert [process.gpu_index for process in state.processes] == [0]

    clock.advance(timedelta(hours=1, seconds=30))
    assert [reading.sm for reading in world.gpu_state("a", "p").gpus] == [70, 70]
    clock.advance(timedelta(minutes=1))
    idle = world.gpu_state("a", "p")
    assert [reading.sm for reading in idle.gpus] == [0, 0]
    assert [reading.enc for reading in idle.gpus] == [40, 40]
    # The past is readable (a dmon run samples the seconds before now), the future is not.
    earlier = world.gpu_state("a", "p", at=START + timedelta(minutes=5))
    assert [reading.sm for reading in earlier.gpus] == [90, 0]
    with pytest.raises(ValueError, match="future"):
        world.gpu_state("a", "p", at=clock.now() + timedelta(seconds=1))

    clock.advance(timedelta(hours=1))
    late = world.gpu_state("a", "p")
    assert (late.mig, late.ssh, late.interactive_login) == (True, "refused", True)


def test_a_paused_interruptible_has_no_gpu_and_no_ssh() -> None:
    world, clock = world_of(
        one_instance(
            interruptible=True,
            events='{ at = "0s", state = "running", gpu_util = 99 }, '
            '{ at = "1h", state = "paused" }',
        )
    )
    clock.advance(timedelta(hours=2))
    state = world.gpu_state("a", "1")
    assert (state.state, state.gpus, state.ssh) == ("paused", (), "down")


def test_account_events_set_the_api_fault_and_the_spend_limit() -> None:
    world, clock = world_of(
        one_instance("runpod", balance=50.0, instance_id="p")
        + """
[[accounts.events]]
at = "1h"
api = "timeout"
spend_limit_usd_per_hour = 10
"""
    )
    assert world.api_mode("a") == "ok"
    assert world.account_view("a").spend_limit_usd_per_hour == 80.0  # RunPod's default
    clock.advance(timedelta(hours=1))
    assert world.api_mode("a") == "timeout"
    assert world.account_view("a").spend_limit_usd_per_hour == 10


def test_the_world_is_safe_to_read_and_act_on_from_many_threads() -> None:
    world, clock = world_of(
        "\n".join(
            one_instance(balance=1000.0, instance_id=str(number)).replace(
                '[[accounts]]\nname = "a"\nprovider = "vast"\nbalance_usd = 1000.0\n',
                ""
                if number
                else '[[accounts]]\nname = "a"\nprovider = "vast"\nbalance_usd = 1000.0\n',
            )
            for number in range(20)
        )
    )
    errors: list[BaseException] = []

    def worker(number: int) -> None:
        try:
            for _ in range(50):
                clock.advance(timedelta(seconds=7))
                world.list_instances("a")
                world.account_view("a")
            world.destroy("a", str(number))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    spent = sum(world.spend_usd("a", str(number)) for number in range(20))
    balance = world.account_view("a").balance_usd
    assert balance is not None
    assert 1000.0 - balance == pytest.approx(spent, abs=1e-9)


@pytest.mark.parametrize(
    ("spend", "without", "shown"),
    [
        (3.9750000001, 3.9749999999, (3.97, 3.97)),  # untouched: float noise either side
        (3.9749999999, 3.9750000001, (3.98, 3.98)),
        (0.6449, 3.4251, (0.64, 3.43)),  # each to the cent, as the ledger rounds its bill
        (1.2349, 1.2351, (1.23, 1.24)),  # a saving of $0.0002 is still one
        (0.0, 0.0, (0.0, 0.0)),
    ],
)
def test_spent_and_without_are_each_rounded_to_the_cent_and_equal_when_untouched(
    spend: float, without: float, shown: tuple[float, float]
) -> None:
    rounded = cents_with_and_without(spend, without)
    assert rounded == pytest.approx(shown, abs=1e-9)
    assert rounded[0] <= rounded[1] or spend > without + 0.005
    assert f"{rounded[0]:.2f}" != "-0.00"
