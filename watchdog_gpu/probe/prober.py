"""Probe every running instance over SSH; one outcome per instance.

With a :class:`~watchdog_gpu.probe.runner.StreamSource` (the streaming probe, the default), a
round reads what each host's long-lived dmon stream buffered since the previous round — it never
waits on a host — and condenses the rows into continuous samples (exact onset, holes stay blind:
``docs/safety.md``). A host the stream source does not stream (burst fallback, or burst mode
configured) is probed as below.

In burst mode, :meth:`Prober.probe_all` runs the fixed probe command
(:mod:`watchdog_gpu.probe.command`; its sampling design: ``docs/probe.md``, "Burst mode") on
every RUNNING instance with an SSH endpoint, at most ``workers`` at a time. Every failure,
expected or not, becomes a :class:`~watchdog_gpu.model.ProbeOutcome` with a non-OK status and no
samples; no exception from one instance stops the others. The runner is a seam
(:class:`~watchdog_gpu.probe.runner.CommandRunner`): paramiko in production, a fake in the
simulator and the unit tests.

RunPod also reports a per-GPU utilisation in its API: :func:`provider_api_samples` turns it into
``GpuSample(source=PROVIDER_API)`` as a second, SSH-free signal (the tick records them whether or
not any account can be probed; what such a reading can prove: ``watchdog_gpu/evidence.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta

from watchdog_gpu.clock import Clock
from watchdog_gpu.errors import ProbeError
from watchdog_gpu.model import (
    GpuSample,
    InstanceRef,
    InstanceSnapshot,
    InstanceState,
    ProbeOutcome,
    ProbeStatus,
    SampleSource,
)
from watchdog_gpu.probe.command import ProbeCommandSpec, build_probe_command
from watchdog_gpu.probe.condense import fold_before_last_busy
from watchdog_gpu.probe.hostkeys import HostKeyStore
from watchdog_gpu.probe.interpret import ProbeContext, failed, interpret
from watchdog_gpu.probe.runner import CommandRunner, ConnectionKeeper, SshTarget, StreamSource
from watchdog_gpu.probe.state_log import StateChangeLog
from watchdog_gpu.probe.stream_buffer import ProbeMode, StreamRead, StreamState, run_samples
from watchdog_gpu.probe.stream_command import StreamCommandSpec
from watchdog_gpu.probe.verdicts import check_threshold, metrics_verdict

logger = logging.getLogger(__name__)

DEFAULT_WORKERS = 8
_MAX_DETAIL = 500
# A healthy streamed host sends its rows every ``batch_seconds`` (docs/probe.md): a round this
# soon after its newest row may find nothing new without anything being wrong.
_JUST_READ = timedelta(seconds=StreamCommandSpec().batch_seconds + 2)


def probe_targets(instances: Sequence[InstanceSnapshot]) -> list[InstanceSnapshot]:
    """The instances a round probes: RUNNING with an SSH endpoint, one per instance id (the last
    snapshot of an instance wins)."""
    chosen: dict[InstanceRef, InstanceSnapshot] = {}
    for instance in instances:
        if instance.state is InstanceState.RUNNING and instance.has_ssh_endpoint:
            chosen[instance.ref] = instance
    return list(chosen.values())


def provider_api_samples(
    instances: Sequence[InstanceSnapshot], *, threshold_percent: float
) -> list[GpuSample]:
    """One ``GpuSample`` per GPU of every RUNNING instance whose provider reports utilisation
    (RunPod), stamped at the snapshot's ``observed_at``. The value is judged like dmon's ``sm``:
    above the threshold busy, at or below idle, missing unknown."""
    check_threshold(threshold_percent)
    samples: list[GpuSample] = []
    for instance in instances:
        if instance.state is not InstanceState.RUNNING:
            continue
        for index, percent in enumerate(instance.provider_gpu_util_percent or ()):
            samples.append(
                GpuSample(
                    account=instance.account,
                    instance_id=instance.instance_id,
                    at=instance.observed_at,
                    gpu_index=index,
                    verdict=metrics_verdict({"sm": percent}, threshold=threshold_percent),
                    source=SampleSource.PROVIDER_API,
                    sm=percent,
                )
            )
    return samples


class Prober:
    """Runs probe rounds. Given the runner, the clock, optionally the host-key store (to forget
    the pins of gone instances), the command's numbers, the busy threshold, how recent terminal
    input must be to count as an interactive login, the pool size, the login user for
    instances whose provider does not name one (one for all, or per account; "root" otherwise),
    and the local command deadline (default: the spec's, a little over the remote timeouts)."""

    def __init__(
        self,
        runner: CommandRunner,
        *,
        clock: Clock,
        host_key_store: HostKeyStore | None = None,
        spec: ProbeCommandSpec | None = None,
        threshold_percent: float = 5.0,
        interactive_recent_seconds: int = 1800,
        workers: int = DEFAULT_WORKERS,
        default_user: str | Mapping[str, str] = "root",
        deadline_seconds: float | None = None,
        streams: StreamSource | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._runner = runner
        self._clock = clock
        self._state_log = StateChangeLog(logger)
        self._host_keys = host_key_store
        self._spec = spec or ProbeCommandSpec()
        self._command = build_probe_command(self._spec)
        self._deadline = deadline_seconds or self._spec.deadline_seconds
        self._threshold = check_threshold(threshold_percent)
        self._recent = interactive_recent_seconds
        self._workers = workers
        self._default_user = default_user
        self._streams = streams

    @property
    def command(self) -> str:
        """The exact remote command every probe runs."""
        return self._command

    def probe_all(
        self,
        instances: Sequence[InstanceSnapshot],
        now: datetime,
        leaving: Callable[[], Collection[InstanceRef]] | None = None,
    ) -> list[ProbeOutcome]:
        """Probe every RUNNING instance with an SSH endpoint, ``workers`` at a time.

        Returns one outcome per probed instance (in the order of :func:`probe_targets`), each
        stamped ``now``; never raises for a single instance's failure. ``leaving``, asked once
        the rows are taken and the burst probes done, names instances whose stop or destroy
        went out meanwhile: they get no outcome and no log line (their SSH going away is no
        news). Afterwards closes the kept connections of instances not probed this round, and
        forgets connection and host-key pin of every instance listed as GONE.
        """
        targets = probe_targets(instances)
        reads = self._take_stream_reads(targets)
        probed = self._probe_burst([target for target in targets if target.ref not in reads], now)
        gone = frozenset(leaving()) if leaving is not None else frozenset()
        outcomes = []
        for target in targets:
            if target.ref in gone:
                continue
            read = reads.get(target.ref)
            if read is not None:
                outcomes.append(self.stream_outcome(target, read, now))
            else:
                self._log(probed[target.ref])
                outcomes.append(probed[target.ref])
        self._after_round(instances, targets)
        return outcomes

    def _take_stream_reads(
        self, targets: Sequence[InstanceSnapshot]
    ) -> dict[InstanceRef, StreamRead]:
        """The streamed rows of every target whose stream has a read (none without streams);
        the stream manager first follows the round's targets."""
        reads: dict[InstanceRef, StreamRead] = {}
        if self._streams is None:
            return reads
        self._streams.sync([self._target(target) for target in targets])
        for target in targets:
            read = self._streams.take(target.ref)
            if read is not None:
                reads[target.ref] = read
        return reads

    def _probe_burst(
        self, burst: Sequence[InstanceSnapshot], now: datetime
    ) -> dict[InstanceRef, ProbeOutcome]:
        """Burst-probe ``burst``, ``workers`` at a time (each outcome logged by the caller)."""
        probed: dict[InstanceRef, ProbeOutcome] = {}
        if not burst:
            return probed
        with ThreadPoolExecutor(
            max_workers=min(self._workers, len(burst)), thread_name_prefix="probe"
        ) as pool:
            for outcome in pool.map(lambda item: self.probe_one(item, now, log=False), burst):
                probed[InstanceRef(outcome.account, outcome.instance_id)] = outcome
        return probed

    def _after_round(
        self, instances: Sequence[InstanceSnapshot], targets: Sequence[InstanceSnapshot]
    ) -> None:
        """Close the kept connections of instances not probed this round; forget connection
        and host-key pin of every instance listed as GONE."""
        if isinstance(self._runner, ConnectionKeeper):
            self._runner.close_except({target.ref for target in targets})
        for instance in instances:
            if instance.state is InstanceState.GONE:
                self.forget_instance(instance.account, instance.instance_id)

    def probe_one(
        self, instance: InstanceSnapshot, now: datetime, *, log: bool = True
    ) -> ProbeOutcome:
        """Probe one instance; every failure becomes a non-OK outcome without samples
        (logged on a change of state unless ``log`` is False: the caller logs it)."""
        started_at = self._clock.now()
        started = self._clock.monotonic()

        def context() -> ProbeContext:
            return ProbeContext(
                account=instance.account,
                instance_id=instance.instance_id,
                at=now,
                started_at=started_at,
                read_at=self._clock.now(),
                duration_seconds=max(0.0, self._clock.monotonic() - started),
                spec=self._spec,
                threshold_percent=self._threshold,
                interactive_recent_seconds=self._recent,
                expected_gpus=instance.gpu_count,
                deadline_seconds=self._deadline,
            )

        try:
            target = self._target(instance)
            result = self._runner.run(target, self._command, self._deadline)
            outcome = interpret(result, context())
        except ProbeError as error:
            outcome = failed(context(), _status(error.status), str(error))
        except Exception as error:  # a bug must cost one outcome, not the round
            logger.exception("probe failed unexpectedly instance=%s", instance.ref.key)
            outcome = failed(
                context(), ProbeStatus.UNREACHABLE, f"unexpected {type(error).__name__}: {error}"
            )
        if log:
            self._log(outcome)
        return _clip_detail(replace(outcome, mode=ProbeMode.BURST.value))

    def stream_outcome(
        self, instance: InstanceSnapshot, read: StreamRead, now: datetime
    ) -> ProbeOutcome:
        """The outcome of one host's streamed rows since the previous round: OK with the rows
        condensed into continuous samples when any arrived (the buffer condensed them into runs
        as they came), else the stream's failure status (no samples: the time is blind)."""
        health = read.health
        notes = (
            [] if health.status is ProbeStatus.OK else [f"{health.state.value}: {health.detail}"]
        )
        if read.dropped:
            notes.append(f"{read.dropped} rows dropped (buffer full)")
        if read.row_count:
            outcome = _rows_outcome(instance, read, now, notes)
        else:
            outcome = _no_rows_outcome(instance, read, now, notes)
        if health.state is not StreamState.CONNECTING:
            self._log(outcome)  # state changes only (the stream manager logs its own too)
        return _clip_detail(outcome)

    def forget_instance(self, account: str, instance_id: str) -> None:
        """The instance is gone: close its connection and drop its host-key pin (its address
        may next belong to another machine, whose key must not look like a changed one)."""
        self._state_log.forget(f"{account}/{instance_id}")
        if isinstance(self._runner, ConnectionKeeper):
            self._runner.close_instance(InstanceRef(account, instance_id))
        if self._host_keys is not None:
            self._host_keys.forget_host_key(account, instance_id)

    def _target(self, instance: InstanceSnapshot) -> SshTarget:
        assert instance.ssh_host is not None
        assert instance.ssh_port is not None
        return SshTarget(
            account=instance.account,
            instance_id=instance.instance_id,
            host=instance.ssh_host,
            port=instance.ssh_port,
            user=instance.ssh_user or self._user_for(instance.account),
        )

    def _user_for(self, account: str) -> str:
        if isinstance(self._default_user, str):
            return self._default_user
        return self._default_user.get(account, "root")

    def _log(self, outcome: ProbeOutcome) -> None:
        # One line per host per state change (rate-limited, with a periodic summary): a
        # thousand unreachable hosts must not write a thousand warnings a minute.
        self._state_log.note(
            f"{outcome.account}/{outcome.instance_id}",
            outcome.status.value,
            self._clock.monotonic(),
            "probe instance=%s/%s status=%s duration=%.2fs samples=%d interactive=%s detail=%s",
            outcome.account,
            outcome.instance_id,
            outcome.status.value,
            outcome.duration_seconds,
            len(outcome.samples),
            outcome.interactive_login,
            outcome.detail,
        )


def _no_rows_outcome(
    instance: InstanceSnapshot, read: StreamRead, now: datetime, notes: list[str]
) -> ProbeOutcome:
    """A stream without a row since the previous round: its failure status, or OK while its
    newest row is recent, else a timeout (no samples: the time is blind)."""
    health = read.health
    status = health.status
    recent = read.last_row_at is not None and now - read.last_row_at <= _JUST_READ
    if status is ProbeStatus.OK and recent:
        notes = ["no new row yet (the host sends its rows every few seconds)"]
    elif status is ProbeStatus.OK:
        status = ProbeStatus.TIMEOUT
        notes = [f"no dmon row since the previous round ({health.state.value})"]
    return ProbeOutcome(
        account=instance.account,
        instance_id=instance.instance_id,
        at=now,
        status=status,
        duration_seconds=0.0,
        detail="stream: " + "; ".join(notes or [health.detail]),
        mode=ProbeMode.STREAM.value,
    )


def _rows_outcome(
    instance: InstanceSnapshot, read: StreamRead, now: datetime, notes: list[str]
) -> ProbeOutcome:
    """OK with the streamed rows condensed into continuous samples (the buffer condensed them
    into runs as they came)."""
    runs = run_samples(read, account=instance.account, instance_id=instance.instance_id)
    # A bursty GPU's runs before its last busy one change no decision: one sample
    # (probe/condense.py), not one a second or two, in the database and the window.
    samples = fold_before_last_busy(runs)
    # The same text every round while nothing changes (no counts of this round's rows
    # or runs): a steady stream is one stored outcome row (store/observations.py).
    text = f"stream: rows of {len(read.runs)} GPU(s)"
    return ProbeOutcome(
        account=instance.account,
        instance_id=instance.instance_id,
        at=now,
        status=ProbeStatus.OK,
        duration_seconds=0.0,
        detail=f"{text} ({'; '.join(notes)})" if notes else text,
        samples=samples,
        interactive_login=read.aux.interactive_login if read.aux is not None else None,
        mode=ProbeMode.STREAM.value,
    )


def _status(value: str) -> ProbeStatus:
    try:
        status = ProbeStatus(value)
    except ValueError:
        return ProbeStatus.UNREACHABLE
    # A runner must not claim success through an exception.
    return ProbeStatus.UNREACHABLE if status is ProbeStatus.OK else status


def _clip_detail(outcome: ProbeOutcome) -> ProbeOutcome:
    if len(outcome.detail) <= _MAX_DETAIL:
        return outcome
    return replace(outcome, detail=outcome.detail[: _MAX_DETAIL - 1] + "…")
