"""Runs the published client's example scripts (examples/ of the cwsandbox sdist) as a user would,
each with the arguments tests/client_suite/examples.toml gives it, and writes the outcomes as a
JUnit XML report for check.py: an example passes when it exits 0 within its time limit.

    run_examples.py --examples examples.toml --sdist DIR --python PYTHON --junit OUT [--only NAME]

The environment (CWSANDBOX_BASE_URL, CWSANDBOX_API_KEY) is the caller's. A run's stdin is empty
unless the list gives one; its output goes to OUT's directory, one log per run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Run:
    script: str
    args: tuple[str, ...] = ()
    stdin: str = ""
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    # For a script that runs until Ctrl-C (it says so): SIGINT after this many seconds, then it
    # must end by itself with status 0 within its time limit.
    interrupt_after: int | None = None

    @property
    def node_id(self) -> str:
        """`examples/<script>::<args>` (`run` without arguments), as check.py reads ids."""
        return f"examples/{self.script}::{' '.join(self.args) or 'run'}"


def load(path: Path) -> tuple[list[Run], dict[str, str]]:
    data = tomllib.loads(path.read_text())
    runs = []
    for index, entry in enumerate(data.get("run", [])):
        extra = set(entry) - {"script", "args", "stdin", "env", "timeout", "interrupt_after"}
        if extra or not isinstance(entry.get("script"), str):
            raise ValueError(f"run[{index}]: needs `script`; unknown keys {sorted(extra)}")
        runs.append(
            Run(
                script=entry["script"],
                args=tuple(entry.get("args", [])),
                stdin=entry.get("stdin", ""),
                env=dict(entry.get("env", {})),
                timeout=int(entry.get("timeout", DEFAULT_TIMEOUT_SECONDS)),
                interrupt_after=entry.get("interrupt_after"),
            )
        )
    not_run = data.get("not_run", {})
    if not all(isinstance(why, str) and why for why in not_run.values()):
        raise ValueError("`not_run` maps each example not run to why")
    return runs, dict(not_run)


def check_coverage(runs: list[Run], not_run: dict[str, str], examples: Path) -> list[str]:
    """Every example script of the sdist is run or said not to be, and only those exist."""
    present = {str(path.relative_to(examples)) for path in examples.rglob("*.py")}
    listed = {run.script for run in runs} | set(not_run)
    problems = [f"examples/{name} is neither run nor listed under not_run" for name in sorted(present - listed)]
    problems += [f"examples/{name} is listed but not in the sdist" for name in sorted(listed - present)]
    return problems


def run_one(run: Run, examples: Path, python: str, logs: Path) -> tuple[str, float, str]:
    """(outcome, seconds, message)."""
    script = examples / run.script
    env = {**os.environ, **run.env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    log = logs / (run.node_id.replace("/", "_").replace("::", "__").replace(" ", "_") + ".log")
    started = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [python, script.name, *run.args],
            cwd=script.parent,
            env=env,
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        assert process.stdin is not None
        process.stdin.write(run.stdin.encode())
        process.stdin.close()
        try:
            if run.interrupt_after is not None:
                try:
                    process.wait(timeout=run.interrupt_after)
                except subprocess.TimeoutExpired:
                    process.send_signal(signal.SIGINT)
            returncode = process.wait(timeout=max(1, run.timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return "failed", time.monotonic() - started, f"did not finish within {run.timeout} s ({log})"
    elapsed = time.monotonic() - started
    if returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        return "failed", elapsed, f"exit {returncode} ({log}): " + " | ".join(tail)
    return "passed", elapsed, ""


def junit(results: list[tuple[Run, str, float, str]]) -> ElementTree.ElementTree:
    suite = ElementTree.Element("testsuite", name="examples", tests=str(len(results)))
    for run, outcome, seconds, message in results:
        script, name = run.node_id.split("::", 1)
        classname = script.removesuffix(".py").replace("/", ".")
        case = ElementTree.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.1f}")
        if outcome == "failed":
            ElementTree.SubElement(case, "failure", message=message)
    return ElementTree.ElementTree(suite)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=Path, required=True)
    parser.add_argument("--sdist", type=Path, required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--only", help="run only the example scripts whose name contains this")
    args = parser.parse_args(argv)
    python = os.path.abspath(args.python) if os.sep in args.python else args.python
    runs, not_run = load(args.examples)
    examples = args.sdist / "examples"
    problems = check_coverage(runs, not_run, examples)
    for problem in problems:
        print(f"client-suite (examples): {problem}", file=sys.stderr)
    if problems:
        return 2
    logs = args.junit.parent / "example-logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for run in runs:
        if args.only and args.only not in run.script:
            continue
        outcome, seconds, message = run_one(run, examples, python, logs)
        print(f"  {run.node_id}: {outcome} in {seconds:.1f} s {message}".rstrip())
        results.append((run, outcome, seconds, message))
    junit(results).write(args.junit, encoding="utf-8", xml_declaration=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
