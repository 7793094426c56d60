"""Every recorded provider payload is exercised by a contract test (a new fixture file without a
test fails here, so the fixtures cannot drift away from what is tested)."""

from __future__ import annotations

from pathlib import Path

from .provider_harness import FIXTURES

CONTRACT_TESTS = Path(__file__).resolve().parent


def test_every_provider_fixture_file_is_used_by_a_contract_test() -> None:
    sources = "\n".join(
        path.read_text()
        for path in CONTRACT_TESTS.glob("test_*.py")
        if path.name != Path(__file__).name
    )
    fixtures = sorted(
        path.relative_to(FIXTURES).as_posix()
        for path in FIXTURES.rglob("*")
        if path.is_file() and path.name != "README.md"
    )

    unused = [fixture for fixture in fixtures if f'"{fixture}"' not in sources]

    assert len(fixtures) >= 50
    assert unused == []


def test_the_fixture_readme_lists_every_fixture_file() -> None:
    readme = (FIXTURES / "README.md").read_text()
    names = sorted(path.name for path in FIXTURES.rglob("*") if path.is_file())

    missing = [name for name in names if name != "README.md" and name not in readme]

    assert missing == []
