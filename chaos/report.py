"""The drill's report: what ran, one line per check with its figures, and the verdict."""

import os
import socket
import sys
from dataclasses import dataclass

from chaos.budget_checks import budget_checks
from chaos.checks import Check, job_checks
from chaos.fault_checks import alert_checks, fault_checks
from chaos.plan import FAULT_KINDS
from chaos.record import DrillRecord

__all__ = ["Report", "evaluate"]


@dataclass
class Report:
    record: DrillRecord
    checks: list[Check]
    command: str
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def summary(self) -> str:
        failed = [check.name for check in self.checks if not check.passed]
        verdict = "PASSED" if not failed else f"FAILED ({', '.join(failed)})"
        minutes, seconds = divmod(int(self.seconds), 60)
        mix = self.record.mix
        return (
            f"chaos drill {'(mixed) ' if mix else ''}{verdict}: "
            f"{len(self.checks) - len(failed)}/{len(self.checks)} checks "
            f"passed, {self.record.options.jobs} jobs, {minutes} min {seconds:02d} s"
            # A failing mixed drill is replayed from its seed.
            + (f"; seed {mix.seed} (replay: --mix --seed {mix.seed})" if mix and failed else "")
        )

    def lines(self) -> list[str]:
        record, options = self.record, self.record.options
        mix = ", ".join(kind for kind in FAULT_KINDS if options.has(kind)) or "none"
        out = [
            f"LLM chaos drill, {record.started_at:%Y-%m-%d %H:%M} UTC, on {socket.gethostname()} "
            f"({len(os.sched_getaffinity(0))} cores, Python {sys.version.split()[0]})",
            f"command: {self.command}",
            f"database {record.database}, Redis {record.redis}; logs in {record.log_dir}",
            f"load: {options.jobs} jobs over {options.duration:g} s, "
            f"{options.llm_workers} llm workers, provider latency {options.latency_ms} ms; "
            f"faults: {mix}",
            "timeline: " + (", ".join(p.describe() for p in record.phases) or "-"),
            *(
                [
                    f"mix: seed {record.mix.seed}; {record.mix.plan}",
                    "policies: " + "; ".join(record.mix.policies),
                ]
                if record.mix
                else []
            ),
            "scaled: " + ", ".join(f"{k.setting}={k.value} ({k.default})" for k in record.knobs),
            f"load {record.load_seconds:.0f} s, drain {record.drain_seconds:.0f} s",
        ]
        out += [f"note: {note}" for note in record.notes]
        if record.processes_died:
            out.append("processes that died: " + ", ".join(record.processes_died))
        width = max(len(check.name) for check in self.checks) if self.checks else 0
        out += [
            f"{'PASS' if check.passed else 'FAIL'}  {check.name:<{width}}  {check.figures}"
            for check in self.checks
        ]
        out.append(self.summary())
        return out


def evaluate(record: DrillRecord) -> list[Check]:
    from chaos.agent_checks import agent_checks

    if record.mix is not None:
        from chaos.mix_checks import mix_checks

        return mix_checks(record)

    return [
        *job_checks(record),
        *agent_checks(record),
        *budget_checks(record),
        *alert_checks(record),
        *fault_checks(record),
    ]
