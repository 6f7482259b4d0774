"""Serve the fake Anthropic Messages API (the fake_provider app) with uvicorn.

    python manage.py fake_anthropic --port 8787 --latency-ms 20-400 --rpm 120 \\
        --itpm 30000 --otpm 8000 --fault 529:0.2 --fault drop:0.05 --seed 7
    python manage.py fake_anthropic --rpm 120 --short-interval 5   # also 10 in any 5 s
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fake_provider import FakeProviderState, build_server, create_app
from fake_provider.state import (
    FAULT_CODES,
    parse_fault,
    parse_latency,
    parse_rate_window,
    parse_rpm,
    parse_short_interval,
)


class Command(BaseCommand):
    help = "Run the local fake Anthropic-compatible provider (POST /v1/messages, /_fake/* control)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host", default="127.0.0.1", help="Interface to listen on (default 127.0.0.1)."
        )
        parser.add_argument(
            "--port", default="8787", help="Port to listen on (default 8787; 0 = any free port)."
        )
        parser.add_argument(
            "--latency-ms",
            default="0",
            help="Delay before each answer: MS (e.g. 50) or a uniform MIN-MAX (e.g. 20-400).",
        )
        parser.add_argument(
            "--rpm",
            default=None,
            help="Requests per sliding 60 s window; over it: 429 (default: none).",
        )
        parser.add_argument(
            "--itpm",
            default=None,
            help="Input tokens (not cache reads) per sliding 60 s window; over it: 429 "
            "(default: none).",
        )
        parser.add_argument(
            "--otpm",
            default=None,
            help="Output tokens per sliding 60 s window, max_tokens counted until the answer; "
            "over it: 429 (default: none).",
        )
        parser.add_argument(
            "--rate-window-seconds",
            default="60",
            help="Length of the rate-limit window in seconds (default 60; shorter compresses "
            "time in tests).",
        )
        parser.add_argument(
            "--short-interval",
            default=None,
            metavar="SECONDS",
            help="Also enforce --rpm over any SECONDS: at most rpm * SECONDS / window requests "
            "in any SECONDS, as the API may ('60 RPM may be enforced as one request a second'); "
            "such a 429 shows room left in its headers (default: the window alone).",
        )
        parser.add_argument(
            "--fault",
            action="append",
            default=[],
            metavar="CODE:RATE",
            help="Inject a fault with probability RATE (0..1); repeatable. "
            f"Codes: {', '.join(FAULT_CODES)} (HTTP statuses by number; spendcap: 429 spend "
            "limit; credit: 400 credit balance too low; context, usagelimit: 400s; timeout: "
            "never answers; drop: connection cut mid-body; garbage: 200 with a non-JSON body; "
            "trickle: 200, then the body one byte a second; repeat_index, skip_index: an "
            "embeddings answer whose last index repeats 0 or skips one).",
        )
        parser.add_argument(
            "--seed", default=None, help="Seed for fault draws and latency (repeatable runs)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = options["host"].strip()
        if not host:
            raise CommandError("--host must not be empty")
        port = self._int("--port", options["port"])
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be between 0 and 65535, not {port}")
        seed = None if options["seed"] is None else self._int("--seed", options["seed"])
        try:
            latency = parse_latency(options["latency_ms"])
        except ValueError as exc:
            raise CommandError(f"--latency-ms: {exc}") from None
        limits: dict[str, int | None] = {}
        for name in ("rpm", "itpm", "otpm"):
            try:
                limits[name] = parse_rpm(options[name])
            except ValueError as exc:
                raise CommandError(f"--{name}: {exc}") from None
            if options[name] is not None and limits[name] is None:
                raise CommandError(
                    f"--{name} must be a positive integer (leave it out for no limit)"
                )
        try:
            window = parse_rate_window(options["rate_window_seconds"])
        except ValueError as exc:
            raise CommandError(f"--rate-window-seconds: {exc}") from None
        try:
            short_interval = parse_short_interval(options["short_interval"])
        except ValueError as exc:
            raise CommandError(f"--short-interval: {exc}") from None
        try:
            faults = [parse_fault(spec) for spec in options["fault"]]
        except ValueError as exc:
            raise CommandError(f"--fault: {exc}") from None

        state = FakeProviderState(
            faults=faults,
            latency_ms=latency,
            rpm=limits["rpm"],
            itpm=limits["itpm"],
            otpm=limits["otpm"],
            rate_window_seconds=window,
            short_interval_seconds=short_interval,
            seed=seed,
        )
        server = build_server(create_app(state), host=host, port=port)
        config = state.start_config

        def announce(srv: Any) -> None:
            shown_host = f"[{host}]" if ":" in host else host
            self.stdout.write(
                f"fake anthropic provider listening on http://{shown_host}:{srv.bound_port} "
                f"(rpm={config.rpm or 'none'}, faults={config.faults_text()})"
                + (f" ({config.describe_limits()})" if config.short_interval_seconds else "")
                + (
                    f" (itpm={config.itpm or 'none'}, otpm={config.otpm or 'none'})"
                    if config.itpm or config.otpm
                    else ""
                )
            )
            self.stdout.flush()

        server.on_started = announce
        try:
            server.run()
        except SystemExit as exc:  # uvicorn exits when it cannot bind
            if exc.code not in (None, 0):
                raise CommandError(
                    f"could not listen on {host}:{port} (see the error above)"
                ) from None

    @staticmethod
    def _int(flag: str, value: str) -> int:
        try:
            return int(str(value).strip())
        except ValueError:
            raise CommandError(f"{flag} must be an integer, not {value!r}") from None
