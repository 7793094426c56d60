"""Every command's ``--help`` has a description, and the shipped man page is the parser's."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from tests.support.manpage import PAGE, render, without_date
from watchdog_gpu.cli import build_parser


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("watchdog-gpu",)
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def test_every_command_and_sub_command_has_a_description() -> None:
    missing = [name for name, parser in commands(build_parser()) if not parser.description]
    assert missing == []


def test_the_shipped_man_page_is_built_from_the_current_parser() -> None:
    # After changing any --help text: python -m tests.support.manpage
    assert without_date(PAGE.read_text(encoding="utf-8")) == without_date(render())


def test_the_man_page_documents_every_command() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for name, _parser in commands(build_parser()):
        if name != "watchdog-gpu":
            assert f".SH COMMAND \\fI\\,'{name.replace('-', chr(92) + '-')}'" in page, name
