"""Composition root: the one module that builds the real HTTP clients, SSH runners, store,
notifiers and clock from the configuration, and hands them to the engine.

Everything else receives its seams as parameters; tests, the simulator and the demo call the same
builders with other transports, runners or clocks.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import httpx

from watchdog_gpu.clock import Clock
from watchdog_gpu.config import AccountConfig, Settings
from watchdog_gpu.errors import ConfigError, ConfigProblem
from watchdog_gpu.executor import Executor
from watchdog_gpu.log import register_secret, register_url_secret
from watchdog_gpu.notify.delivery import (
    AppriseDelivery,
    Backoff,
    config_from_section,
    routes_from_config,
)
from watchdog_gpu.plan import PlanContext
from watchdog_gpu.probe.command import ProbeCommandSpec
from watchdog_gpu.probe.prober import Prober
from watchdog_gpu.probe.runner import AccountRunners, CommandRunner, StreamSource
from watchdog_gpu.protection import protection_for
from watchdog_gpu.providers import DEFAULT_API_URLS, PROVIDERS, Provider, new_http_client
from watchdog_gpu.providers.http import stoppable_sleep
from watchdog_gpu.rules import lookback_for
from watchdog_gpu.rules.base import DestructiveRuleConfig, SalvageConfig
from watchdog_gpu.rules.budget import BudgetConfig
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
from watchdog_gpu.store import ActionRow, Store, create_engine_for, upgrade_to_head
from watchdog_gpu.tick import TickSettings, Watchdog

if TYPE_CHECKING:
    from paramiko import PKey

log = logging.getLogger(__name__)

TransportFactory = Callable[[AccountConfig], httpx.BaseTransport | None]


def open_store(database_url: str, *, migrate_in_child: bool = False) -> Store:
    """The store on ``database_url``, migrated to the newest schema — in a child process with
    ``migrate_in_child`` (the daemon: store/migrate_process.py says why)."""
    engine = create_engine_for(database_url)
    if migrate_in_child:
        from watchdog_gpu.store.migrate_process import upgrade_in_child_process

        upgrade_in_child_process(engine, database_url)
    else:
        upgrade_to_head(engine)
    return Store(engine)


def assemble_daemon(settings: Settings, clock: Clock, environ: Mapping[str, str]) -> Assembly:
    """:func:`assemble` for the long-running daemon: its database is migrated in a child
    process, so Alembic never becomes resident in it."""
    return assemble(settings, clock, environ, migrate_in_child=True)


def _secret_value(settings: Settings, account: AccountConfig, environ: Mapping[str, str]) -> str:
    secret = account.api_key.resolve(environ)
    if secret is None:
        index = settings.accounts.index(account)
        raise ConfigError(
            [ConfigProblem(f"accounts[{index}].api_key", f"{account.api_key.describe(environ)}")]
        )
    value = secret.get_secret_value()
    register_secret(value)
    return value


def build_providers(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    transport_for: TransportFactory | None = None,
    *,
    stop: threading.Event | None = None,
    jitter_seed: str | None = None,
) -> dict[str, Provider]:
    """One provider adapter per account, each with its own ``httpx.Client``. When ``stop`` is
    given, setting it cancels every retry wait in flight (see ``stoppable_sleep``). With
    ``jitter_seed`` each account's retry jitter is seeded from it and the account's name, so a
    simulated run (whose retries wait on the virtual clock) is the same every time."""
    sleep = clock.sleep if stop is None else stoppable_sleep(clock.sleep, stop)
    providers: dict[str, Provider] = {}
    for account in settings.accounts:
        api_key = _secret_value(settings, account, environ)
        timeout = httpx.Timeout(account.request_timeout.total_seconds())
        client = new_http_client(
            account.api_url or DEFAULT_API_URLS[account.provider],
            timeout=timeout,
            transport=transport_for(account) if transport_for is not None else None,
        )
        providers[account.name] = PROVIDERS[account.provider](
            account.name,
            client,
            api_key,
            sleep=sleep,
            monotonic=clock.monotonic,
            retry_budget_seconds=account.retry_budget.total_seconds(),
            rng=None if jitter_seed is None else random.Random(f"{jitter_seed}:{account.name}"),  # noqa: S311 - jitter
        )
    return providers


def probe_spec(settings: Settings) -> ProbeCommandSpec:
    return ProbeCommandSpec(
        samples=settings.probe.samples_per_probe,
        interval_seconds=settings.probe.sample_interval_seconds,
    )


def build_ssh_runners(
    settings: Settings, store: Store, clock: Clock, environ: Mapping[str, str]
) -> CommandRunner | None:
    """A paramiko runner per account that has SSH authentication configured (None if none)."""
    from watchdog_gpu.probe.ssh import ParamikoRunner, SshTimeouts

    probe = settings.probe
    timeouts = SshTimeouts(
        connect_seconds=probe.connect_timeout.total_seconds(),
        banner_seconds=probe.banner_timeout.total_seconds(),
        auth_seconds=probe.auth_timeout.total_seconds(),
    )
    keys_by_account = load_ssh_keys(settings, environ)
    runners: dict[str, CommandRunner] = {}
    evidence = settings.evidence()
    for account in settings.accounts:
        ssh = account.ssh
        if not ssh.has_authentication:
            log.warning(
                "no SSH key: its GPUs cannot be probed account=%s gpu_evidence=%s",
                account.name,
                evidence[account.name].summary,
            )
            continue
        runners[account.name] = ParamikoRunner(
            keys_by_account[account.name],
            store,
            use_agent=ssh.use_agent,
            timeouts=timeouts,
            clock=clock,
        )
    return AccountRunners(runners) if runners else None


def load_ssh_keys(settings: Settings, environ: Mapping[str, str]) -> dict[str, list[PKey]]:
    """The private keys of every account with SSH authentication, by account name: what the
    probe offers, and what ``config check`` tries. Raises ConfigError listing every key that
    cannot be loaded, by the account's dotted path (``accounts[0].ssh.private_key``)."""
    from watchdog_gpu.probe.sshkeys import SshCredentials, load_private_keys

    keys: dict[str, list[PKey]] = {}
    problems: list[ConfigProblem] = []
    for index, account in enumerate(settings.accounts):
        ssh = account.ssh
        if not ssh.has_authentication:
            continue
        key_text = ssh.private_key.resolve(environ) if ssh.private_key else None
        passphrase = ssh.key_passphrase.resolve(environ) if ssh.key_passphrase else None
        if passphrase is not None:
            register_secret(passphrase)
        credentials = SshCredentials(
            private_key_path=ssh.key_file,
            private_key_text=key_text.get_secret_value() if key_text else None,
            passphrase=passphrase.get_secret_value() if passphrase else None,
            use_agent=ssh.use_agent,
            where=f"accounts[{index}].ssh",
        )
        try:
            keys[account.name] = load_private_keys(credentials)
        except ConfigError as error:
            problems += error.problems
    if problems:
        raise ConfigError(problems)
    return keys


def build_streams(
    settings: Settings, runner: CommandRunner | None, clock: Clock
) -> StreamSource | None:
    """The streaming probe over the paramiko runners (None in burst mode or without SSH)."""
    if settings.probe.mode != "stream" or not isinstance(runner, AccountRunners):
        return None
    from watchdog_gpu.probe.streams import StreamManager, StreamSettings

    return StreamManager(
        runner,
        clock=clock,
        settings=StreamSettings(
            stall_after=settings.probe.stall_after,
            threshold_percent=settings.rules.of(IdleGpuConfig).threshold_percent,
        ),
    )


def build_prober(
    settings: Settings,
    runner: CommandRunner | None,
    store: Store,
    clock: Clock,
    streams: StreamSource | None = None,
) -> Prober | None:
    if not settings.probe.enabled or runner is None:
        return None
    idle = settings.rules.of(IdleGpuConfig)
    return Prober(
        runner,
        clock=clock,
        host_key_store=store,
        spec=probe_spec(settings),
        threshold_percent=idle.threshold_percent,
        workers=settings.probe.workers,
        default_user={account.name: account.ssh.user for account in settings.accounts},
        deadline_seconds=settings.probe.command_deadline.total_seconds(),
        streams=streams,
    )


def build_delivery(settings: Settings, environ: Mapping[str, str]) -> AppriseDelivery | None:
    """Apprise delivery for the configured routes and Apprise config file (None when there are
    neither)."""
    routes = routes_from_config(settings.notify, environ)
    config = config_from_section(settings.notify, environ)
    for route in routes:
        register_url_secret(route.url)  # tokens in hosts, paths, queries: never in a log line
    if config is not None:
        register_secret(config.text)
    if not routes and config is None:
        return None
    delivery = AppriseDelivery(
        routes,
        config=config,
        timeout_seconds=settings.notify.timeout.total_seconds(),
        host=settings.watchdog.node_name,
    )
    for part in delivery.secret_parts:  # the config file's services' tokens too
        register_secret(part)
    return delivery


def plan_context(settings: Settings) -> PlanContext:
    return PlanContext(
        mode=settings.watchdog.mode,
        rules=settings.rules.by_name(),
        safety=settings.safety,
        protected_accounts=frozenset(a.name for a in settings.accounts if a.protect),
        tick_interval=settings.watchdog.poll_interval,
    )


def tick_settings(settings: Settings) -> TickSettings:
    rules = settings.rules.by_name()
    return TickSettings(
        context=plan_context(settings),
        lookback=lookback_for(rules),
        sample_retention=settings.watchdog.sample_retention,
        raw_sample_retention=settings.watchdog.raw_sample_retention,
        budget_timezone=settings.rules.of(BudgetConfig).timezone,
        continuity=2 * settings.watchdog.poll_interval + timedelta(seconds=30),
        notify_backoff=Backoff(settings.notify.retry_initial, settings.notify.retry_max),
        evidence=settings.evidence(),
        threshold_percent=settings.rules.of(IdleGpuConfig).threshold_percent,
        digest=settings.notify.digest,
    )


def salvage_configs(settings: Settings) -> dict[str, SalvageConfig]:
    return {
        name: config.salvage
        for name, config in settings.rules.by_name().items()
        if isinstance(config, DestructiveRuleConfig) and config.salvage.command
    }


def action_guard(store: Store, context: PlanContext) -> Callable[[ActionRow, datetime], str | None]:
    """What the executor asks right before a provider call: is the instance protected or
    snoozed now? (Either may have been added after the action was planned.)"""

    def guard(row: ActionRow, now: datetime) -> str | None:
        snapshot = store.instance_snapshot(row.account, row.instance_id)
        if snapshot is not None:
            reason = protection_for(snapshot, store.list_protections(), context)
            if reason is not None:
                return reason
        for snooze in store.list_snoozes(now):
            if (snooze.account, snooze.instance_id) == (row.account, row.instance_id):
                return f"snoozed until {snooze.until.isoformat()}"
        return None

    return guard


@dataclass
class Assembly:
    """Everything the composition root built, so the caller can close it. Setting ``stop``
    cancels the provider calls' retry waits (the daemon uses it as its stop event)."""

    watchdog: Watchdog
    store: Store
    providers: dict[str, Provider]
    prober: Prober | None
    runner: CommandRunner | None
    stop: threading.Event = field(default_factory=threading.Event)
    streams: StreamSource | None = None
    # The context every daemon job runs in: nothing for a real run; the demo's night holds its
    # clock still in it (sim/night_clock.py), so a job's listings, calls and records share one
    # instant of the night as they do on simulate's virtual clock.
    job_scope: Callable[[], AbstractContextManager[object]] = nullcontext

    def fence_provider_calls(self) -> None:
        """Make every provider HTTP request prove, just before it is sent, that the store's
        fence still holds (``Store.check_leadership``): a team's deposed leader sends nothing,
        not even a listing, from the moment its lock session ends."""
        store = self.store

        def still_leading(_request: httpx.Request) -> None:
            store.check_leadership()

        for client in self._http_clients():
            client.event_hooks = {
                **client.event_hooks,
                "request": [*client.event_hooks["request"], still_leading],
            }

    def _http_clients(self) -> list[httpx.Client]:
        clients = []
        for provider in self.providers.values():
            client = getattr(getattr(provider, "http", None), "client", None)
            if isinstance(client, httpx.Client):
                clients.append(client)
        return clients

    def close(self) -> None:
        for part in (self.streams, self.runner):  # the streams' sessions first
            close = getattr(part, "close", None)
            if callable(close):
                close()
        for client in self._http_clients():
            client.close()


def assemble(
    settings: Settings,
    clock: Clock,
    environ: Mapping[str, str],
    *,
    store: Store | None = None,
    transport_for: TransportFactory | None = None,
    runner: CommandRunner | None = None,
    streams: StreamSource | None = None,
    streaming: bool = True,
    claimer: str = "executor",
    jitter_seed: str | None = None,
    migrate_in_child: bool = False,
) -> Assembly:
    """Build the engine from ``settings``. ``transport_for``, ``runner`` and ``streams``
    replace the real network (the simulator and tests); by default real HTTP and paramiko are
    used, and with ``[probe] mode = "stream"`` the streaming probe over the paramiko runners
    (``streaming=False``: burst probes only, e.g. a single tick); ``jitter_seed`` makes the
    providers' retry jitter repeatable (the simulator); ``migrate_in_child``: see
    :func:`open_store`."""
    if store is None:
        store = open_store(
            settings.watchdog.effective_database_url(environ), migrate_in_child=migrate_in_child
        )
    stop = threading.Event()
    providers = build_providers(
        settings, clock, environ, transport_for, stop=stop, jitter_seed=jitter_seed
    )
    if runner is None and settings.probe.enabled:
        runner = build_ssh_runners(settings, store, clock, environ)
    if streams is None and streaming:
        streams = build_streams(settings, runner, clock)
    prober = build_prober(settings, runner, store, clock, streams)
    executor = Executor(
        store,
        providers,
        settings.safety,
        salvage_configs(settings),
        claimer=claimer,
        on_forget_instance=prober.forget_instance if prober is not None else None,
        guard=action_guard(store, plan_context(settings)),
        current_episodes=lambda since: {
            record.episode_key for record in store.list_findings(seen_since=since)
        },
        clock=clock.now,
    )
    watchdog = Watchdog(
        store,
        providers,
        executor,
        tick_settings(settings),
        prober=prober,
        delivery=build_delivery(settings, environ),
    )
    return Assembly(watchdog, store, providers, prober, runner, stop, streams)
