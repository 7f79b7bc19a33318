"""Holds a run of the published client's integration suite to tests/client_suite/expected.toml.

Every test that does not pass must be listed for the runtime it ran on, with its outcome
(failed or skipped), the reason, and either the issue item that will fix it (`fix`) or why it
never will here (`never`). A failing test that is not listed fails the check; so does a listed
test that now passes, or that ended otherwise than listed (a stale entry), like the Slurm
divergence list.

    check.py runtimes   --expected FILE                 the runtimes the file has sections for
    check.py deselected --expected FILE --runtime R     the suite's files not run (one a line)
    check.py check      --expected FILE --runtime R --junit FILE [--junit FILE…] [--only-run]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("passed", "failed", "skipped")


class ExpectationsError(Exception):
    """The expectations file is malformed."""


@dataclass(frozen=True)
class Expected:
    test: str
    outcome: str
    reason: str
    why_it_stays: str


@dataclass(frozen=True)
class Expectations:
    runtimes: tuple[str, ...]
    deselected: dict[str, str]
    by_runtime: dict[str, dict[str, Expected]]


def load(path: Path) -> Expectations:
    data = tomllib.loads(path.read_text())
    runtimes = data.get("runtimes")
    if not isinstance(runtimes, list) or not runtimes or not all(isinstance(r, str) for r in runtimes):
        raise ExpectationsError("`runtimes` must list the runtimes the suite runs on")
    deselected = data.get("deselected", {})
    if not isinstance(deselected, dict) or not all(isinstance(v, str) and v for v in deselected.values()):
        raise ExpectationsError("`deselected` maps each file not run to why")
    by_runtime: dict[str, dict[str, Expected]] = {}
    unknown = set(data) - {"runtimes", "deselected", *runtimes}
    if unknown:
        raise ExpectationsError(f"sections of no runtime listed in `runtimes`: {sorted(unknown)}")
    for runtime in runtimes:
        entries = data.get(runtime, [])
        if not isinstance(entries, list):
            raise ExpectationsError(f"`{runtime}` must be an array of tables ([[{runtime}]])")
        listed: dict[str, Expected] = {}
        for index, entry in enumerate(entries):
            where = f"{runtime}[{index}]"
            test = entry.get("test")
            if not isinstance(test, str) or "::" not in test:
                raise ExpectationsError(f"{where}: `test` must be a pytest node id (file::name)")
            if test in listed:
                raise ExpectationsError(f"{where}: {test} is listed twice")
            outcome = entry.get("outcome")
            if outcome not in ("failed", "skipped"):
                raise ExpectationsError(f"{where}: `outcome` must be failed or skipped")
            reason = entry.get("reason")
            if not isinstance(reason, str) or not reason.strip():
                raise ExpectationsError(f"{where}: `reason` is required")
            fix, never = entry.get("fix"), entry.get("never")
            if (fix is None) == (never is None) or not isinstance(fix or never, str) or not (fix or never).strip():
                raise ExpectationsError(f"{where}: give exactly one of `fix` (the issue item) or `never` (why)")
            extra = set(entry) - {"test", "outcome", "reason", "fix", "never"}
            if extra:
                raise ExpectationsError(f"{where}: unknown keys {sorted(extra)}")
            listed[test] = Expected(test, outcome, reason, fix or never)
        by_runtime[runtime] = listed
    return Expectations(tuple(runtimes), dict(deselected), by_runtime)


def node_id(classname: str, name: str) -> str:
    """A pytest node id from JUnit's classname (dotted module, then classes) and name."""
    parts = classname.split(".")
    module_end = max((i for i, part in enumerate(parts) if part.startswith("test_")), default=len(parts) - 1)
    module = "/".join(parts[: module_end + 1]) + ".py"
    return "::".join([module, *parts[module_end + 1 :], name])


def outcomes(junit: Path) -> dict[str, str]:
    """Each test case of a JUnit XML report and how it ended."""
    results: dict[str, str] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test = node_id(case.get("classname", ""), case.get("name", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        # A test erroring in teardown after passing has two records: the failure wins.
        if results.get(test) != "failed":
            results[test] = outcome
    return results


def check(expected: dict[str, Expected], results: dict[str, str], only_run: bool) -> list[str]:
    """What breaks the expectations (empty: they hold)."""
    problems = []
    for test, outcome in sorted(results.items()):
        listed = expected.get(test)
        if listed is None:
            if outcome != "passed":
                problems.append(f"{test} {outcome} and is not in the expectations: fix it, or list it with why")
        elif outcome == "passed":
            problems.append(f"{test} passes now: remove its stale entry ({listed.why_it_stays})")
        elif outcome != listed.outcome:
            problems.append(f"{test} {outcome}, listed as {listed.outcome}: update its entry")
    if not only_run:
        for test in sorted(set(expected) - set(results)):
            problems.append(f"{test} is listed but did not run: remove its stale entry")
    return problems


def summary(runtime: str, results: dict[str, str]) -> str:
    counts = {outcome: sum(1 for o in results.values() if o == outcome) for outcome in OUTCOMES}
    return (
        f"client suite ({runtime} runtime): {counts['passed']} passed / "
        f"{counts['failed']} expected failures / {counts['skipped']} skipped"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("runtimes", "deselected", "check"))
    parser.add_argument("--expected", type=Path, required=True)
    parser.add_argument("--runtime")
    parser.add_argument("--junit", type=Path, action="append", help="a JUnit XML report (repeatable)")
    parser.add_argument("--only-run", action="store_true", help="check only the tests that ran (a -k run)")
    args = parser.parse_args(argv)
    try:
        expectations = load(args.expected)
    except (ExpectationsError, tomllib.TOMLDecodeError) as error:
        print(f"{args.expected}: {error}", file=sys.stderr)
        return 2
    if args.command == "runtimes":
        print(" ".join(expectations.runtimes))
        return 0
    if args.runtime not in expectations.by_runtime:
        print(f"{args.expected}: no section for runtime {args.runtime!r}", file=sys.stderr)
        return 2
    if args.command == "deselected":
        print("\n".join(expectations.deselected))
        return 0
    if not args.junit:
        parser.error("check needs --junit")
    results = {}
    for report in args.junit:
        results.update(outcomes(report))
    problems = check(expectations.by_runtime[args.runtime], results, args.only_run)
    for problem in problems:
        print(f"client-suite ({args.runtime}): {problem}", file=sys.stderr)
    print(summary(args.runtime, results))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
