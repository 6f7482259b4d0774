"""``manage.py llm_chaos``'s options and run. The command itself
(ops/management/commands/llm_chaos.py) is a thin wrapper that imports this module only when it
runs, because production does not install the drill."""

import random
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chaos import FAULT_KINDS, Drill, DrillOptions, Refused, Report, evaluate
from chaos.mix_plan import MIX_FAULT_KINDS, MIX_MIN_DURATION
from chaos.plan import DEFAULT_DURATION, DEFAULT_JOBS, MIN_DURATION

MIX_JOBS = 600
MIX_DURATION = 180.0
MIX_AGENT_RUNS_EVERY = 15
"""The mixed drill starts one agent run per this many jobs unless --agent-runs says."""

__all__ = ["add_arguments", "handle"]


def _faults(value: str) -> frozenset[str]:
    kinds = frozenset(k.strip() for k in value.split(",") if k.strip() and k.strip() != "none")
    unknown = kinds - set(FAULT_KINDS)
    if unknown:
        raise CommandError(
            f"--faults: unknown {', '.join(sorted(unknown))}; use {','.join(FAULT_KINDS)} or none"
        )
    return kinds


def add_arguments(parser: CommandParser) -> None:
    defaults = DrillOptions()
    parser.add_argument(
        "--mix",
        action="store_true",
        help="the mixed drill: every kind of work at once (real-time and deferred jobs, "
        "fallbacks, cancelled streams, agent runs with caps and a hanging tool, key and feature "
        "budgets) with seeded faults and timings, checked against the provider's own bill; "
        f"faults among {','.join(MIX_FAULT_KINDS)}",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"jobs to submit (default {DEFAULT_JOBS}, with --mix {MIX_JOBS})",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help=f"seconds of load and faults (default {DEFAULT_DURATION:g}, at least "
        f"{MIN_DURATION:g}; with --mix {MIX_DURATION:g}, at least {MIX_MIN_DURATION:g}); "
        "the drain follows",
    )
    parser.add_argument(
        "--faults",
        default=None,
        help="comma-separated fault kinds, or none: "
        + "; ".join(f"{kind}: {what}" for kind, what in FAULT_KINDS.items()),
    )
    parser.add_argument("--rate-429", type=float, default=defaults.rate_429)
    parser.add_argument("--drop-rate", type=float, default=defaults.drop_rate)
    parser.add_argument("--latency-ms", default=defaults.latency_ms)
    parser.add_argument("--llm-workers", type=int, default=defaults.llm_workers)
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=defaults.drain_timeout,
        help="seconds the jobs get to end after the load",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"the fake provider's dice (default {defaults.seed}); with --mix the whole plan "
        "(default: drawn at random, and printed: --seed N replays it)",
    )
    parser.add_argument(
        "--agent-runs",
        type=int,
        default=None,
        help="agent runs to start along the jobs (3 turns, 3 tool calls each); checks that "
        "every run ends and that no completed tool call runs again (default none; with --mix "
        f"one per {MIX_AGENT_RUNS_EVERY} jobs)",
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument(
        "--yes-really",
        action="store_true",
        help="run even where this looks like a system in use (it FLUSHDBs its Redis)",
    )


def _resolve(opts: dict[str, Any]) -> dict[str, Any]:
    """The options left out take the defaults of the drill asked for (classic or mixed)."""
    mix = opts.get("mix", False)
    opts = dict(opts)
    if opts.get("jobs") is None:
        opts["jobs"] = MIX_JOBS if mix else DEFAULT_JOBS
    if opts.get("duration") is None:
        opts["duration"] = MIX_DURATION if mix else DEFAULT_DURATION
    if opts.get("faults") is None:
        opts["faults"] = ",".join(MIX_FAULT_KINDS if mix else FAULT_KINDS)
    if opts.get("agent_runs") is None:
        opts["agent_runs"] = max(1, opts["jobs"] // MIX_AGENT_RUNS_EVERY) if mix else 0
    if opts.get("seed") is None:
        opts["seed"] = random.SystemRandom().randrange(1, 1_000_000) if mix else DrillOptions().seed
    return opts


def handle(command: BaseCommand, opts: dict[str, Any]) -> None:
    opts = _resolve(opts)
    mix = opts.get("mix", False)
    if opts["jobs"] < 1 or opts["llm_workers"] < 1:
        raise CommandError("--jobs and --llm-workers must be at least 1")
    minimum = MIX_MIN_DURATION if mix else MIN_DURATION
    if opts["duration"] < minimum:
        raise CommandError(f"--duration must be at least {minimum:g} s")
    if not (0 <= opts["rate_429"] <= 1 and 0 <= opts["drop_rate"] <= 1):
        raise CommandError("--rate-429 and --drop-rate are fractions between 0 and 1")
    options = DrillOptions(
        jobs=opts["jobs"],
        duration=opts["duration"],
        faults=_faults(opts["faults"]),
        rate_429=opts["rate_429"],
        drop_rate=opts["drop_rate"],
        latency_ms=opts["latency_ms"],
        llm_workers=opts["llm_workers"],
        drain_timeout=opts["drain_timeout"],
        seed=opts["seed"],
        agent_runs=opts["agent_runs"],
        log_dir=opts["log_dir"],
        yes_really=opts["yes_really"],
    )
    if mix:
        from chaos.mix import mix_options

        options = mix_options(options)
        unknown = _faults(opts["faults"]) - set(MIX_FAULT_KINDS)
        if unknown:
            raise CommandError(
                f"--faults: the mixed drill draws {','.join(MIX_FAULT_KINDS)} only, not "
                + ",".join(sorted(unknown))
            )
    started = time.monotonic()

    def say(line: str) -> None:
        command.stdout.write(line)
        command.stdout.flush()

    command_line = "python manage.py llm_chaos" + _non_default(opts)
    if mix:
        from chaos.mix import MixDrill

        drill: Drill = MixDrill(options, say=say)
    else:
        drill = Drill(options, say=say)
    try:
        report = drill.run(lambda record: Report(record, evaluate(record), command_line))
    except Refused as refusal:
        raise CommandError(f"refusing to run: {refusal}", returncode=2) from None
    except KeyboardInterrupt:
        raise CommandError(
            "interrupted: every process the drill started is stopped, its alert routes and "
            "budget removed",
            returncode=130,
        ) from None
    report.seconds = time.monotonic() - started
    say("")
    for line in report.lines():
        say(line)
    if not report.passed:
        raise CommandError(report.summary(), returncode=report.exit_code)


def _non_default(opts: dict[str, Any]) -> str:
    """The options given, as they would be typed (for the report's command line); a mixed
    drill's always with its seed, so that the line replays it."""
    defaults = DrillOptions()
    mix = opts.get("mix", False)
    shown = {
        "mix": False,
        "jobs": MIX_JOBS if mix else DEFAULT_JOBS,
        "duration": MIX_DURATION if mix else DEFAULT_DURATION,
        "faults": ",".join(MIX_FAULT_KINDS if mix else FAULT_KINDS),
        "agent_runs": max(1, opts["jobs"] // MIX_AGENT_RUNS_EVERY) if mix else 0,
        "rate_429": defaults.rate_429,
        "drop_rate": defaults.drop_rate,
        "latency_ms": defaults.latency_ms,
        "llm_workers": defaults.llm_workers,
        "drain_timeout": defaults.drain_timeout,
        "seed": None if mix else defaults.seed,
        "log_dir": None,
        "yes_really": False,
    }
    parts = []
    for name, default in shown.items():
        value = opts.get(name)
        if value == default:
            continue
        flag = "--" + name.replace("_", "-")
        parts.append(
            flag
            if value is True
            else f"{flag} {value:g}"
            if isinstance(value, float)
            else f"{flag} {value}"
        )
    return "".join(" " + part for part in parts)
