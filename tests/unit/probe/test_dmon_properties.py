"""Property tests: any padding parses the same; '-' never yields idle; a cut never invents a
row."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import Verdict
from watchdog_gpu.probe.dmon import DmonValue, parse_dmon
from watchdog_gpu.probe.verdicts import ACTIVITY_METRICS, row_verdict

OTHER_COLUMNS = ("pwr", "gtemp", "mtemp", "mclk", "pclk", "fb", "bar1", "gract")


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[DmonValue, ...], ...]


@st.composite
def tables(draw: st.DrawFn) -> Table:
    metrics = draw(
        st.lists(
            st.sampled_from((*ACTIVITY_METRICS, "mem", *OTHER_COLUMNS)),
            unique=True,
            min_size=1,
            max_size=10,
        )
    )
    columns = ("gpu", *metrics)
    percent = st.one_of(st.none(), st.integers(0, 100))
    row = st.tuples(
        st.integers(0, 15),
        *(
            percent if name in ACTIVITY_METRICS else st.one_of(st.none(), st.integers(0, 99999))
            for name in metrics
        ),
    )
    return Table(columns, tuple(draw(st.lists(row, min_size=1, max_size=12))))


def spaces(draw: st.DrawFn, low: int, high: int) -> str:
    return " " * draw(st.integers(low, high))


@st.composite
def rendered(draw: st.DrawFn) -> tuple[Table, str]:
    """A table and its text with random padding: leading, between tokens and trailing."""
    table = draw(tables())

    def line(tokens: list[str], prefix: str = "") -> str:
        text = prefix + spaces(draw, 0, 4)
        text += "".join(token + spaces(draw, 1, 8) for token in tokens[:-1]) + tokens[-1]
        return text + spaces(draw, 0, 3) + "\n"

    text = line(list(table.columns), "#") + line(["Idx"] + ["%"] * (len(table.columns) - 1), "#")
    for values in table.rows:
        if draw(st.booleans()) and draw(st.booleans()):
            text += spaces(draw, 0, 5) + "\n"  # a blank line now and then
        text += line(["-" if value is None else str(value) for value in values])
    return table, text


@given(rendered())
def test_any_padding_parses_to_the_same_rows(case: tuple[Table, str]) -> None:
    table, text = case
    parsed = parse_dmon(text)
    assert parsed.columns == table.columns
    assert [tuple(row.values.values()) for row in parsed.rows] == list(table.rows)
    assert parsed.notes == ()


@given(rendered())
def test_windows_line_ends_parse_the_same(case: tuple[Table, str]) -> None:
    _, text = case
    unix = parse_dmon(text)
    windows = parse_dmon(text.replace("\n", "\r\n"))
    assert [row.values for row in windows.rows] == [row.values for row in unix.rows]


@given(tables(), st.integers(0, 100), st.sampled_from([None, 0]))
def test_a_dash_never_yields_idle(table: Table, threshold: int, processes: int | None) -> None:
    text = "# " + " ".join(table.columns) + "\n"
    text += "".join(
        " ".join("-" if value is None else str(value) for value in values) + "\n"
        for values in table.rows
    )
    for row in parse_dmon(text).rows:
        verdict = row_verdict(row, threshold=threshold, processes=processes)
        activity = [row.metric(name) for name in ACTIVITY_METRICS if name in row.values]
        shown = [value for value in activity if value is not None]
        if verdict is Verdict.IDLE:
            assert row.metric("sm") is not None
            assert len(shown) == len(activity)
            assert all(value <= threshold for value in shown)
        if row.metric("sm") is None:
            assert verdict is not Verdict.IDLE
        if verdict is Verdict.BUSY:
            assert any(value > threshold for value in shown)


@given(rendered(), st.data())
def test_a_cut_stream_never_invents_or_misreads_a_row(
    case: tuple[Table, str], data: st.DataObject
) -> None:
    table, text = case
    cut = data.draw(st.integers(0, len(text)))
    try:
        parsed = parse_dmon(text[:cut])
    except DmonError as error:
        kind = error.kind
        assert kind == "unparseable"  # only "nothing usable", never another verdict
        return
    found = [tuple(row.values.values()) for row in parsed.rows]
    assert found == list(table.rows[: len(found)])
