from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watchdog_gpu.errors import ScenarioError
from watchdog_gpu.sim.scenario import dotted_path, load_scenario, parse_scenario

SCENARIOS = Path(__file__).parents[2] / "scenarios"

HEADER = """
name = "t"
start = "2026-03-02T20:00:00Z"
duration = "12h"
"""


def problems_of(text: str) -> dict[str, str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(HEADER + text)
    return {problem.path: problem.message for problem in caught.value.problems}


def test_the_documented_example_loads_with_typed_values() -> None:
    scenario = load_scenario(SCENARIOS / "forgotten_4090.toml")

    assert scenario.name == "forgotten-4090"
    assert scenario.start == datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
    assert scenario.duration == timedelta(hours=12)
    assert scenario.tick == timedelta(seconds=60)
    account = scenario.account("vast-main")
    assert account.provider == "vast"
    assert account.balance_usd == 20.0
    assert account.effective_api_key == "sim-vast-main"
    instance = account.instances[0]
    assert instance.compute_usd_per_hour == 0.37
    assert instance.events[0].state == "running"
    assert instance.events[1].gpu_util == 0


def test_events_written_out_of_order_are_sorted_keeping_file_order_on_ties() -> None:
    scenario = parse_scenario(
        HEADER
        + """
[[accounts]]
name = "a"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
events = [
  { at = "2h", gpu_util = 0 },
  { at = "0s", state = "running" },
  { at = "2h", gpu_util = 50 },
  { at = "1h", enc = 30 },
]
"""
    )
    events = scenario.accounts[0].instances[0].events
    assert [event.at for event in events] == [
        timedelta(0),
        timedelta(hours=1),
        *[timedelta(hours=2)] * 2,
    ]
    assert [event.gpu_util for event in events[2:]] == [0, 50]


def test_a_bad_event_offset_is_reported_with_its_dotted_path() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
[[accounts.instances]]
id = "2"
compute_usd_per_hour = 1.0
events = [
  { at = "0s", state = "running" },
  { at = "1h", gpu_util = 5 },
  { at = "soon", gpu_util = 0 },
]
"""
    )
    assert "accounts[0].instances[1].events[2].at" in problems
    assert "not a duration" in problems["accounts[0].instances[1].events[2].at"]


def test_every_problem_is_listed_not_only_the_first() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "cloudy"
balance_usd = "lots"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = -1.0
colour = "red"
events = [{ at = "0s", state = "exploded", gpu_util = 101 }]
"""
    )
    assert set(problems) >= {
        "accounts[0].provider",
        "accounts[0].balance_usd",
        "accounts[0].instances[0].compute_usd_per_hour",
        "accounts[0].instances[0].colour",
        "accounts[0].instances[0].events[0].state",
        "accounts[0].instances[0].events[0].gpu_util",
    }
    assert "unknown key" in problems["accounts[0].instances[0].colour"]


def test_quoted_numbers_and_booleans_are_not_taken_for_percentages() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "vast"
[[accounts.instances]]
id = "1"
gpu_count = 2
compute_usd_per_hour = 1.0
events = [{ at = "0s", state = "running", gpu_util = "95" }, { at = "1h", gpu_util = [0, true] }]
"""
    )
    assert set(problems) == {
        "accounts[0].instances[0].events[0].gpu_util",
        "accounts[0].instances[0].events[1].gpu_util[1]",
    }


def test_account_names_must_be_unique_and_instance_ids_unique_per_account() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "runpod"
[[accounts.instances]]
id = "x"
compute_usd_per_hour = 1.0
events = [{ at = "0s", state = "running" }]
[[accounts.instances]]
id = "x"
compute_usd_per_hour = 1.0
events = [{ at = "0s", state = "running" }]
[[accounts]]
name = "a"
provider = "runpod"
api_key = "other"
"""
    )
    assert "duplicate instance id 'x'" in problems["accounts[0].instances[1].id"]
    assert "duplicate account name 'a'" in problems["accounts[1].name"]


def test_the_same_instance_id_in_two_accounts_is_fine() -> None:
    scenario = parse_scenario(
        HEADER
        + """
[[accounts]]
name = "a"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
events = [{ at = "0s", state = "running" }]
[[accounts]]
name = "b"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
events = [{ at = "0s", state = "running" }]
"""
    )
    assert [account.name for account in scenario.accounts] == ["a", "b"]


def test_values_out_of_range_and_inconsistent_events_are_refused() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "vast"
events = [{ at = "13h", api = "ok" }, { at = "1h" }]
[[accounts.instances]]
id = "not-a-number"
gpu_count = 2
compute_usd_per_hour = 1.0
events = [
  { at = "0s", state = "paused" },
  { at = "1h", gpu_util = [1, 2, 3] },
  { at = "2h", gpu_util = 5, gpu_pattern = { period = "10m", busy_for = "1m" } },
  { at = "3h", gpu_pattern = { period = "10m", busy_for = "11m" } },
  { at = "4h" },
]
"""
    )
    assert "after the end" in problems["accounts[0].events[0].at"]
    assert "needs balance_usd, api or spend_limit" in problems["accounts[0].events[1]"]
    assert "integers" in problems["accounts[0].instances[0].id"]
    assert "interruptible" in problems["accounts[0].instances[0].events[0].state"]
    assert "3 values for 2 GPU(s)" in problems["accounts[0].instances[0].events[1].gpu_util"]
    assert "exclude each other" in problems["accounts[0].instances[0].events[2]"]
    assert "period" in problems["accounts[0].instances[0].events[3].gpu_pattern.busy_for"]
    assert "at least one of" in problems["accounts[0].instances[0].events[4]"]


def test_an_instance_that_never_gets_a_state_never_exists_and_is_refused() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "a"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
events = [{ at = "0s", gpu_util = 5 }]
"""
    )
    assert "never exists" in problems["accounts[0].instances[0].events"]


def test_lambda_has_no_balance_no_stop_no_instance_storage_and_whole_cent_prices() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "l"
provider = "lambda"
balance_usd = 10.0
[[accounts.instances]]
id = "abc"
compute_usd_per_hour = 2.495
storage_usd_per_gb_month = 0.2
events = [{ at = "0s", state = "running" }, { at = "1h", state = "stopped" }]
"""
    )
    assert set(problems) == {
        "accounts[0].balance_usd",
        "accounts[0].instances[0].compute_usd_per_hour",
        "accounts[0].instances[0].storage_usd_per_gb_month",
        "accounts[0].instances[0].events[1].state",
    }


def test_start_without_a_timezone_is_refused() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario('name = "t"\nstart = 2026-03-02T20:00:00\nduration = "1h"\n')
    assert [problem.path for problem in caught.value.problems] == ["start"]


def test_invalid_toml_and_a_missing_file_are_scenario_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="invalid TOML"):
        parse_scenario("name = \n")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "absent.toml")


def test_dotted_paths_render_indices_in_brackets() -> None:
    assert dotted_path(("accounts", 0, "instances", 1, "events", 2, "at")) == (
        "accounts[0].instances[1].events[2].at"
    )
    assert dotted_path(()) == ""


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.toml")), ids=lambda path: path.name)
def test_every_example_scenario_in_the_repository_is_valid(path: Path) -> None:
    assert load_scenario(path).accounts


def test_the_example_in_the_projects_scenario_format_document_is_valid() -> None:
    document = (Path(__file__).parents[3] / "docs" / "scenario-format.md").read_text()
    example = document.split("```toml\n", 1)[1].split("```", 1)[0]
    scenario = parse_scenario(example)
    assert scenario.account("vast-main").instances[0].id == "9001"


def test_the_built_in_world_of_sim_serve_is_valid() -> None:
    from watchdog_gpu.commands.sim import default_scenario

    scenario = default_scenario()
    assert {account.provider for account in scenario.accounts} == {"vast", "runpod", "lambda"}


def test_status_msg_and_serverless_endpoint_belong_to_their_provider() -> None:
    problems = problems_of(
        """
[[accounts]]
name = "v"
provider = "vast"
[[accounts.instances]]
id = "1"
compute_usd_per_hour = 1.0
serverless_endpoint = "ep1"
events = [
  { at = "0s", state = "running" },
  { at = "1h", provider_state = "exited", status_msg = "Error: host fault" },
  { at = "2h", provider_state = "stopped", status_msg = "Error: host fault" },
]
[[accounts]]
name = "r"
provider = "runpod"
[[accounts.instances]]
id = "pod1"
compute_usd_per_hour = 1.0
serverless_endpoint = "ep1"
events = [{ at = "0s", provider_state = "EXITED", status_msg = "Error" }]
"""
    )
    assert problems.keys() == {
        "accounts[0].instances[0].serverless_endpoint",
        "accounts[0].instances[0].events[1].status_msg",
        "accounts[1].instances[0].events[0].status_msg",
    }
