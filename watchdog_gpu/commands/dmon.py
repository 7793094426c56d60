"""``watchdog-gpu dmon parse FILE [--json] [--threshold N | --config PATH]``: the dmon parser,
for people debugging a host.

Save ``nvidia-smi dmon`` output to a file (or pipe it in with ``FILE`` = ``-``) and see what the
watchdog reads from it: the rows, and per GPU whether it was busy, idle or unknown.

The ``--json`` contract, verdicts and exit codes: ``docs/commands.md``, "dmon parse".
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
from pathlib import Path
from typing import Any

from watchdog_gpu.cli import EXIT_DMON_ERROR, EXIT_OK, EXIT_USAGE, doc_paragraph, summary
from watchdog_gpu.errors import DmonError
from watchdog_gpu.probe.dmon import DmonTable, parse_dmon
from watchdog_gpu.probe.verdicts import GpuSummary, check_threshold, summarise
from watchdog_gpu.rules.idle_gpu import IdleGpuConfig

# What the idle rule judges with when nothing else is configured.
DEFAULT_THRESHOLD: float = IdleGpuConfig.model_fields["threshold_percent"].default

_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``dmon parse`` to the command line."""
    dmon = subparsers.add_parser(
        "dmon",
        help=summary("dmon"),
        description="Read nvidia-smi dmon output: `dmon parse` judges each GPU of a saved "
        "file as the probe would (busy, idle or unknown).",
    )
    actions = dmon.add_subparsers(dest="dmon_action", metavar="ACTION", required=True)
    parse = actions.add_parser(
        "parse",
        help="parse saved nvidia-smi dmon output and judge each GPU",
        description=doc_paragraph(__doc__),
    )
    parse.add_argument("file", metavar="FILE", help="a file of dmon output, or - for stdin")
    parse.add_argument("--json", action="store_true", help="print one JSON object")
    parse.add_argument(
        "--threshold",
        type=_threshold,
        default=None,
        metavar="N",
        help="a GPU is busy when sm/enc/dec/jpg/ofa exceed N percent (default: the idle rule's "
        f"threshold_percent, {DEFAULT_THRESHOLD:g} unless --config sets another)",
    )
    parse.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="take the threshold from this config file's [rules.idle_gpu] threshold_percent",
    )
    parse.set_defaults(handler=run_parse)


def _threshold(text: str) -> float:
    try:
        return check_threshold(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a percentage between 0 and 100, got {text!r}"
        ) from None


def decode_output(data: bytes) -> str:
    """Text from saved output: UTF-8, or UTF-16 with a byte-order mark (PowerShell's ``>``);
    undecodable bytes become U+FFFD, which the parser then rejects as garbage."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    return data.decode("utf-8", errors="replace")


def run_parse(args: argparse.Namespace) -> int:
    """Handle ``dmon parse``: exit 0 with rows, 3 for an nvidia-smi error text, 2 if unreadable."""
    threshold = _effective_threshold(args)
    if threshold is None:
        return EXIT_USAGE
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        print(f"watchdog-gpu dmon parse: cannot read {args.file}: {reason}", file=sys.stderr)
        return EXIT_USAGE
    try:
        table = parse_dmon(decode_output(data), dated=True)
    except DmonError as error:
        if args.json:
            failure = {"kind": error.kind, "message": str(error)}
            _print_json({"ok": False, "error": failure, "rows": [], "gpus": {}})
        else:
            print(f"nvidia-smi error ({error.kind}): {error}", file=sys.stderr)
        return EXIT_DMON_ERROR
    for note in table.notes:
        print(f"note: {note}", file=sys.stderr)
    if table.device_limit_warning:
        print("note: nvidia-smi monitored only its default number of GPUs", file=sys.stderr)
    summaries = summarise(table, threshold=threshold)
    if args.json:
        _print_json(_json_result(table, summaries) | {"threshold": threshold})
    else:
        _print_table(table, summaries)
        print(f"(busy above {threshold:g} %)")
    return EXIT_OK


def _effective_threshold(args: argparse.Namespace) -> float | None:
    """``--threshold``, else the idle rule's threshold of ``--config``'s file, else its default;
    ``None`` (the problems printed) when the config file is invalid."""
    if args.threshold is not None:
        return float(args.threshold)
    if args.config is None:
        return DEFAULT_THRESHOLD
    from watchdog_gpu.config import ConfigError, load_settings  # lazy: only with --config

    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        for problem in error.problems:
            print(f"watchdog-gpu dmon parse: {args.config}: {problem}", file=sys.stderr)
        return None
    return settings.rules.of(IdleGpuConfig).threshold_percent


def _json_result(table: DmonTable, summaries: dict[int, GpuSummary]) -> dict[str, Any]:
    return {
        "ok": True,
        "error": None,
        "rows": [dict(row.values) for row in table.rows],
        "gpus": {
            str(gpu): {"verdict": summary.verdict.value, "samples": summary.samples}
            for gpu, summary in summaries.items()
        },
    }


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, ensure_ascii=False))


def _print_table(table: DmonTable, summaries: dict[int, GpuSummary]) -> None:
    columns = table.columns
    cells = [[_cell(row.values.get(name)) for name in columns] for row in table.rows]
    widths = [max([len(name), *(len(line[i]) for line in cells)]) for i, name in enumerate(columns)]
    for line in [columns, *cells]:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    if not table.rows:
        print("(no rows)")
    print()
    for gpu, gpu_summary in summaries.items():
        print(f"GPU {gpu}: {gpu_summary.verdict.value} ({gpu_summary.samples} samples)")


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
