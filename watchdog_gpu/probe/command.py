"""The burst probe's remote command, and how its output is cut back into sections.

Only validated integers (:class:`ProbeCommandSpec`) go into the text, never anything a provider
says about an instance. Sampling design, output layout and how interactive logins are read:
``docs/probe.md``, "Burst mode".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from watchdog_gpu.probe.compute_apps import COMPUTE_APPS_FIELDS

# 124 is what coreutils/busybox ``timeout`` exits with when it had to stop the command.
REMOTE_TIMEOUT_EXIT_STATUS = 124

_MARK = "===WATCHDOG-GPU:"
BEGIN_MARKER = f"{_MARK}BEGIN==="
END_MARKER = f"{_MARK}END==="
GPUS_MARKER = f"{_MARK}GPUS==="
_DMON_EXIT = re.compile(rf"^{_MARK}DMON-EXIT:([0-9]+)===$", re.MULTILINE)
_APPS_EXIT = re.compile(rf"^{_MARK}APPS-EXIT:([0-9]+)===$", re.MULTILINE)


def _check_int(name: str, value: int, low: int, high: int) -> None:
    # bool is an int in Python; a True sample count is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProbeCommandSpec:
    """The numbers the remote command is built from; each is checked to be a plain integer in a
    sane range, so the command text can only ever be one of a fixed family of strings.

    ``samples`` dmon samples ``interval_seconds`` apart; ``startup_allowance_seconds`` is what
    nvidia-smi may spend initialising NVML before the first sample (seconds on a big machine);
    ``query_timeout_seconds`` bounds each of the two short queries.
    """

    samples: int = 10
    interval_seconds: int = 1
    startup_allowance_seconds: int = 10
    query_timeout_seconds: int = 10

    def __post_init__(self) -> None:
        _check_int("samples", self.samples, 1, 600)
        # nvidia-smi rejects intervals outside "between 1 second and N seconds".
        _check_int("interval_seconds", self.interval_seconds, 1, 60)
        _check_int("startup_allowance_seconds", self.startup_allowance_seconds, 1, 300)
        _check_int("query_timeout_seconds", self.query_timeout_seconds, 1, 120)
        if self.samples * self.interval_seconds > 3600:
            raise ValueError("samples × interval_seconds must not exceed one hour")

    @property
    def dmon_timeout_seconds(self) -> int:
        """The remote ``timeout`` for dmon: the sampling time plus the start-up allowance."""
        return self.samples * self.interval_seconds + self.startup_allowance_seconds

    @property
    def deadline_seconds(self) -> float:
        """The local deadline for the whole command: every remote timeout plus a margin for the
        shell and the network, so the remote ``timeout`` normally fires first."""
        return float(self.dmon_timeout_seconds + 2 * self.query_timeout_seconds + 10)


def build_probe_command(spec: ProbeCommandSpec) -> str:
    """The exact command text for ``spec``. Given only validated integers, returns a string with
    no single quotes inside the ``sh -c '…'`` body; nothing else can reach it."""
    # NVSMI_SHOW_ALL_DEVICES lifts the 4-GPU default limit of drivers <= 535 (to 16); ``-o T``
    # prints the time of each row, so a stall inside nvidia-smi shows as a gap, not coverage.
    dmon = (
        f"NVSMI_SHOW_ALL_DEVICES=1 timeout {spec.dmon_timeout_seconds} nvidia-smi dmon -s u -o T"
        f" -d {spec.interval_seconds} -c {spec.samples} 2>&1"
    )
    apps = (
        f"timeout {spec.query_timeout_seconds} nvidia-smi"
        f" --query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}"
        " --format=csv,noheader,nounits 2>&1"
    )
    # ``-L`` maps GPU and MIG-device UUIDs to dmon's GPU index, to place each process.
    gpus = f"timeout {spec.query_timeout_seconds} nvidia-smi -L 2>/dev/null"
    body = "; ".join(
        (
            f"echo {BEGIN_MARKER}",
            dmon,
            f"echo {_MARK}DMON-EXIT:$?===",
            apps,
            f"echo {_MARK}APPS-EXIT:$?===",
            gpus,
            f"echo {GPUS_MARKER}",
            "date +%s",
            "stat -c %X /dev/pts/[0-9]* 2>/dev/null",
            f"echo {END_MARKER}",
        )
    )
    return f"sh -c '{body}'"


@dataclass(frozen=True, slots=True)
class ProbeSections:
    """The probe output cut at its markers.

    ``dmon_exit``/``apps_exit`` are the remote exit statuses (``None``: the marker is missing).
    ``gpus_text`` is the output of ``nvidia-smi -L`` (empty when it failed). ``remote_now`` and
    ``tty_input_times`` are epoch seconds (``None``/empty when unreadable). ``complete`` is False
    when the end marker never arrived.
    """

    dmon_text: str
    dmon_exit: int | None
    apps_text: str
    apps_exit: int | None
    gpus_text: str
    remote_now: int | None
    tty_input_times: tuple[int, ...]
    complete: bool


def exit_marker(part: str, status: int) -> str:
    """The line the command prints after ``part`` ("DMON" or "APPS") exits with ``status``
    (what a fake host must print too)."""
    return f"{_MARK}{part}-EXIT:{status}==="


def split_probe_output(stdout: str) -> ProbeSections | None:
    """Cut the output of :func:`build_probe_command` into its sections.

    Returns ``None`` when the begin marker is absent (the command never started, e.g. no ``sh``);
    never raises. Text printed before the begin marker (login banners, rc files) is dropped.
    """
    start = stdout.find(BEGIN_MARKER + "\n")
    if start < 0:
        return None
    text = stdout[start + len(BEGIN_MARKER) + 1 :]
    dmon_match = _DMON_EXIT.search(text)
    if dmon_match is None:
        return ProbeSections(text, None, "", None, "", None, (), complete=False)
    dmon_text = text[: dmon_match.start()]
    rest = text[dmon_match.end() + 1 :]
    apps_match = _APPS_EXIT.search(rest)
    if apps_match is None:
        return ProbeSections(dmon_text, int(dmon_match.group(1)), rest, None, "", None, (), False)
    apps_text = rest[: apps_match.start()]
    tail = rest[apps_match.end() + 1 :]
    gpus_text, _, tty_text = tail.partition(f"{GPUS_MARKER}\n")
    complete = END_MARKER in tty_text
    tty_lines = tty_text.split(END_MARKER)[0].split()
    numbers = [int(token) for token in tty_lines if token.isascii() and token.isdigit()]
    return ProbeSections(
        dmon_text=dmon_text,
        dmon_exit=int(dmon_match.group(1)),
        apps_text=apps_text,
        apps_exit=int(apps_match.group(1)),
        gpus_text=gpus_text,
        remote_now=numbers[0] if numbers else None,
        tty_input_times=tuple(numbers[1:]),
        complete=complete,
    )


def interactive_login(sections: ProbeSections, recent_seconds: int) -> bool | None:
    """Whether someone typed into a terminal on the instance within ``recent_seconds``.

    ``None`` when the remote clock could not be read (not known, which is not "no"); ``False``
    when no terminal exists or none had input recently. Ages use the remote clock on both sides,
    so clock skew between the daemon and the instance does not matter.
    """
    if sections.remote_now is None or not sections.complete:
        return None
    return any(sections.remote_now - seen <= recent_seconds for seen in sections.tty_input_times)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one remote command printed and how it ended.

    ``exit_status`` is ``None`` when the session ended without reporting one; ``timed_out`` is True
    when the local deadline closed the channel first; ``output_truncated`` when the output went
    over the runner's size limit and the rest was not read.
    """

    stdout: str
    stderr: str
    exit_status: int | None
    timed_out: bool
    output_truncated: bool = False
