"""``manage.py llm_cluster_drill``'s options and run (ops/management/commands/
llm_cluster_drill.py imports this only when it runs: production does not install the drill)."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chaos.cluster.drill import ClusterOptions, run_cluster_drill
from chaos.cluster.topology import PATHS
from chaos.safety import Refused

__all__ = ["add_arguments", "handle"]


def _paths(value: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in value.split(",") if p.strip() and p.strip() != "none")
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise CommandError(f"--paths: unknown {', '.join(sorted(unknown))}; use {','.join(PATHS)}")
    return paths


def add_arguments(parser: CommandParser) -> None:
    defaults = ClusterOptions()
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help=f"the paths of a worker host frozen, one scenario each (default {','.join(PATHS)}; "
        "none for no freeze)",
    )
    parser.add_argument(
        "--no-kill", action="store_true", help="leave out killing a worker host's processes"
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=defaults.calls,
        help=f"long calls in flight on the worker host (default {defaults.calls})",
    )
    parser.add_argument(
        "--call-seconds",
        type=float,
        default=defaults.call_seconds,
        help=f"how long each long call takes (default {defaults.call_seconds:g})",
    )
    parser.add_argument(
        "--freeze-seconds",
        type=float,
        default=defaults.freeze_seconds,
        help=f"how long a path stays frozen (default {defaults.freeze_seconds:g})",
    )
    parser.add_argument(
        "--no-mixed",
        action="store_true",
        help="leave out killing a worker host under a mixed load (streams, a batch, agent runs)",
    )
    parser.add_argument(
        "--no-redis-kill", action="store_true", help="leave out killing the Redis primary"
    )
    parser.add_argument(
        "--waiting",
        type=int,
        default=defaults.waiting,
        help="at the Redis primary's kill: jobs waiting replicated, and as many on the primary "
        f"only (default {defaults.waiting})",
    )
    parser.add_argument(
        "--no-web-kill", action="store_true", help="leave out killing a web host with sockets open"
    )
    parser.add_argument(
        "--sockets",
        type=int,
        default=defaults.sockets,
        help=f"WebSockets open through HAProxy at the web host's kill (default {defaults.sockets})",
    )
    parser.add_argument(
        "--no-rate-limit",
        action="store_true",
        help="leave out the rate limiter at the provider's limit across hosts",
    )
    parser.add_argument(
        "--rpm",
        type=int,
        default=defaults.rpm,
        help=f"the provider's requests a minute in the rate-limit scenario (default "
        f"{defaults.rpm})",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--yes-really", action="store_true")


def handle(command: BaseCommand, opts: dict[str, Any]) -> None:
    options = ClusterOptions(
        paths=_paths(opts["paths"]),
        kill=not opts["no_kill"],
        mixed=not opts["no_mixed"],
        redis_kill=not opts["no_redis_kill"],
        waiting=opts["waiting"],
        web_kill=not opts["no_web_kill"],
        sockets=opts["sockets"],
        rate_limit=not opts["no_rate_limit"],
        rpm=opts["rpm"],
        calls=opts["calls"],
        call_seconds=opts["call_seconds"],
        freeze_seconds=opts["freeze_seconds"],
        seed=opts["seed"],
        log_dir=opts["log_dir"],
        yes_really=opts["yes_really"],
    )

    def say(line: str) -> None:
        command.stdout.write(line)
        command.stdout.flush()

    try:
        report = run_cluster_drill(options, say=say)
    except Refused as refusal:
        raise CommandError(f"refusing to run: {refusal}", returncode=2) from None
    except KeyboardInterrupt:
        raise CommandError(
            "interrupted: every process the drill started is stopped, its hosts removed",
            returncode=130,
        ) from None
    say("")
    for line in report.lines():
        say(line)
    if not report.passed:
        raise CommandError(report.lines()[-1], returncode=1)
