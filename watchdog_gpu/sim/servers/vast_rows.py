"""How the Vast.ai dialect renders one instance: its row in ``GET /instances``.

State mapping: starting → ``loading``; running → ``running``; paused (outbid) → ``scheduling``
with the bid below ``min_bid``; stopped → ``stopped`` in all four status fields; stopped by Vast
itself (zero balance, or a scripted host fault with its ``status_msg``) → ``stopped`` with
``intended_status`` still ``running`` and no ``min_bid``; ``exited`` → ``exited`` with
``cur_state`` ``running`` (the GPU still held); a pending destroy keeps its status with
``next_state: "unloaded"``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from watchdog_gpu.sim.records import InstanceView

# (actual_status, intended_status, cur_state, next_state) of each generic state. A paused (outbid)
# bid instance is shown the documented way: scheduling while its user wants it running, with its
# bid below min_bid (docs/providers.md, "Vast.ai states").
_STATUS: dict[str, tuple[str | None, str, str, str]] = {
    "starting": ("loading", "running", "running", "running"),
    "running": ("running", "running", "running", "running"),
    "paused": ("scheduling", "running", "stopped", "running"),
    "stopped": ("stopped", "stopped", "stopped", "stopped"),
}
# The same for each provider state a scenario may set (``provider_state``).
_PROVIDER_STATUS: dict[str, tuple[str | None, str, str, str]] = {
    "null": (None, "running", "running", "running"),
    "created": ("created", "running", "running", "running"),
    "loading": ("loading", "running", "running", "running"),
    "scheduling": ("scheduling", "running", "stopped", "running"),
    "running": ("running", "running", "running", "running"),
    "stopped": ("stopped", "stopped", "stopped", "stopped"),
    "exited": ("exited", "running", "running", "running"),
    "frozen": ("frozen", "frozen", "running", "running"),
    "rebooting": ("rebooting", "running", "running", "running"),
    "offline": ("offline", "running", "running", "running"),
    "unknown": ("unknown", "running", "running", "running"),
}
_STATUS_MESSAGES = {
    "null": None,
    "created": "Instance created, waiting to be provisioned",
    "loading": "Pulling image layers",
    "scheduling": "Attempting to schedule your instance. Your GPU is currently in use.",
    "exited": ": OCI runtime create failed:",
    "frozen": "Instance frozen",
    "rebooting": "Rebooting",
    "offline": "Host offline",
    "unknown": "No recent heartbeat from the host",
}


def instance_row(view: InstanceView, now: datetime) -> dict[str, Any]:
    """A Vast instance row (``GET /instances``) for ``view`` at ``now``."""
    actual, intended, current, following = _statuses(view)
    running = view.state == "running" and (
        view.provider_state is None or view.provider_state.reachable
    )
    gpu_util = _gpu_util(view) if running else None
    storage = view.storage_usd_per_hour
    start = view.created_at.timestamp()
    return {
        "id": int(view.instance_id),
        "machine_id": 30000 + view.ordinal,
        "host_id": 180000 + view.ordinal,
        "bundle_id": 1180000000 + view.ordinal,
        "actual_status": actual,
        "intended_status": "stopped" if view.destroying else intended,
        "cur_state": current,
        "next_state": "unloaded" if view.destroying else following,
        "status_msg": _status_message(view),
        "label": view.label,
        "template_id": None,
        "template_hash_id": None,
        "template_name": None,
        "image_uuid": "vastai/pytorch:cuda-12.4.1-auto",
        "image_args": [],
        "image_runtype": "ssh_direc ssh_proxy",
        "extra_env": [],
        "onstart": None,
        "public_ipaddr": view.ssh_host,
        "local_ipaddrs": "172.17.0.2",
        "ssh_host": view.ssh_host,
        "ssh_idx": "0",
        "ssh_port": view.ssh_port,
        "start_date": start,
        "end_date": start + 30 * 86400,
        "uptime_mins": _uptime_minutes(view, now) if running else None,
        "duration": round(now.timestamp() - start, 1),
        "cpu_name": "AMD EPYC 7543 32-Core Processor",
        "cpu_cores_effective": 8.0 * view.gpu_count,
        "cpu_ram": 64000 * view.gpu_count,
        "cpu_util": 12.0 if running else None,
        "gpu_name": view.gpu_name,
        "gpu_arch": "nvidia",
        "gpu_ram": 24564,
        "gpu_totalram": 24564 * view.gpu_count,
        "gpu_util": gpu_util,
        "gpu_temp": (40.0 + 0.4 * gpu_util) if gpu_util is not None else None,
        "gpu_frac": 1.0,
        "num_gpus": view.gpu_count,
        "cuda_max_good": 12.8,
        "driver_version": "570.133.07",
        "disk_space": view.disk_gb,
        "disk_usage": -1,
        "disk_util": -1,
        "ports": (
            {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(view.ssh_port)}]}  # noqa: S104
            if running
            else None
        ),
        "direct_port_start": -1,
        "direct_port_end": -1,
        "direct_port_count": 0,
        "static_ip": False,
        "geolocation": "Simulated, Loopback",
        "country_code": None,
        "verification": "verified",
        "rentable": False,
        "external": False,
        "min_bid": _min_bid(view),
        "is_bid": view.interruptible,
        "dph_base": view.compute_usd_per_hour,
        "dph_total": view.compute_usd_per_hour + storage,
        "storage_cost": view.storage_usd_per_gb_month,
        "storage_total_cost": storage,
        "inet_up_cost": 0.0,
        "inet_down_cost": 0.0,
        "reliability2": 0.99,
        "time_remaining": "",
        "time_remaining_isbid": "",
        "search": _offered_pricing(view),
        "instance": _charged_pricing(view),
        "volume_info": [],
    }


def _statuses(view: InstanceView) -> tuple[str | None, str, str, str]:
    """(actual_status, intended_status, cur_state, next_state) before a pending destroy."""
    exact = view.provider_state
    if exact is None:
        return _STATUS[view.state]
    actual, intended, current, following = _PROVIDER_STATUS.get(
        exact.name, (exact.name, "running", "running", "running")
    )
    if exact.by_provider:
        intended = "running"  # Vast stopped it itself: its user still wants it running.
    return actual, intended, current, following


def _gpu_util(view: InstanceView) -> float | None:
    """The mean SM utilisation of a running instance (None under MIG or without GPUs)."""
    sm = [reading.sm for reading in view.gpu.gpus]
    if not sm or view.gpu.mig:
        return None
    return float(sum(sm) / len(sm))


def _uptime_minutes(view: InstanceView, now: datetime) -> float | None:
    if view.started_at is None:
        return None
    return round((now - view.started_at).total_seconds() / 60, 1)


def _min_bid(view: InstanceView) -> float | None:
    """The current minimum winning bid: above the instance's while outbid (paused). A contract
    Vast parked itself is quoted none (the simulator's assumption: Vast documents none, and the
    official client's v1 Instance has no min_bid at all)."""
    exact = view.provider_state
    if exact is not None and exact.by_provider:
        return None
    factor = 1.3 if view.state == "paused" and exact is None else 0.7
    return round(view.compute_usd_per_hour * factor, 4)


def _offered_pricing(view: InstanceView) -> dict[str, float]:
    """The pricing the offer was rented at (running rates, no discount)."""
    total = view.compute_usd_per_hour + view.storage_usd_per_hour_running
    return {
        "gpuCostPerHour": view.compute_usd_per_hour,
        "diskHour": view.storage_usd_per_hour_running,
        "totalHour": total,
        "discountTotalHour": 0,
        "discountedTotalPerHour": total,
    }


def _charged_pricing(view: InstanceView) -> dict[str, float]:
    """What bills now. A reserved instance lists its full rate and charges the discounted one
    (the charged pricing's discountedTotalPerHour; dph_total stays the listed rate)."""
    compute = view.compute_usd_per_hour if view.compute_billed else 0
    storage = view.storage_usd_per_hour
    discount = compute * view.reserved_discount
    return {
        "gpuCostPerHour": compute,
        "diskHour": storage,
        "totalHour": compute + storage,
        "discountTotalHour": discount,
        "discountedTotalPerHour": compute - discount + storage,
    }


def _status_message(view: InstanceView) -> str | None:
    if view.destroying:
        return "Destroying instance"
    if view.provider_state is not None and view.provider_state.detail is not None:
        return view.provider_state.detail
    if view.provider_state is not None and view.provider_state.name in _STATUS_MESSAGES:
        return _STATUS_MESSAGES[view.provider_state.name]
    if view.state == "paused":
        return _STATUS_MESSAGES["scheduling"]
    if view.state == "starting":
        return "Loading image"
    if view.state == "running":
        return "success, running vastai/pytorch_cuda-12.4.1-auto/ssh"
    return None
