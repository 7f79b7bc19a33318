#!/usr/bin/env python3
"""The Slurm parity comparer (Python 3.11 standard library only).

`run`: runs each command line of commands.txt in the current environment (one side: real Slurm, or
the emulator's symlinked commands first on PATH) and stores stdout, stderr and exit status.

`compare`: normalises both sides' outputs (times, dates, durations, job ids, hosts, paths, pids),
breaks every difference of form into units (a table or text line, a `Key=value` key or value, a
line break, a trailing space, a `show config` key, a field name, the exit status, a stderr line),
and checks each unit against divergences.toml. It fails on a unit no entry explains and on an entry
that explains nothing (so the list stays honest).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

COMMAND_TIMEOUT_SECONDS = 60


def command_lines(path: Path) -> list[str]:
    """The command lines of commands.txt: one a line, `#` comments and blank lines skipped."""
    lines = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def with_job_ids(command: str, job_ids: dict[str, int]) -> str:
    def job_id(match: re.Match[str]) -> str:
        role = match.group(1)
        if role not in job_ids:
            raise SystemExit(f"commands.txt: unknown job role {{{role}}} in: {command}")
        return str(job_ids[role])

    return re.sub(r"\{([a-z_]+)\}", job_id, command)


def argv_of(command: str) -> tuple[list[str], bool]:
    """A command line's words, and whether it ends with `2>&1` (stderr merged into stdout, so
    the capture shows which stream a command writes first)."""
    argv = shlex.split(command)
    if argv and argv[-1] == "2>&1":
        return argv[:-1], True
    return argv, False


def run(args: argparse.Namespace) -> int:
    job_ids = json.loads(Path(args.job_ids).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for command in command_lines(Path(args.commands)):
        argv, merged = argv_of(with_job_ids(command, job_ids))
        try:
            done = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                timeout=COMMAND_TIMEOUT_SECONDS,
                check=False,
            )
            status, stdout, stderr = done.returncode, done.stdout, done.stderr or b""
        except subprocess.TimeoutExpired:
            status, stdout, stderr = None, b"", b"(timed out)\n"
        results.append(
            {
                "command": command,
                "status": status,
                "stdout": stdout.decode("utf-8", "replace"),
                "stderr": stderr.decode("utf-8", "replace"),
            }
        )
    (out / "results.json").write_text(json.dumps({"job_ids": job_ids, "results": results}, indent=1))
    return 0


# --- normalisation -----------------------------------------------------------------------------

DATE = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b")
DATE_LINE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$", re.M)
# `M:SS`, `H:MM:SS`, `D-HH:MM:SS`; digits become 9 so the width stays and the value goes. In tables an
# exit code `0:15` has the same shape and is normalised with them (`3:0`, `0:0` are not); in
# `Key=value` lines only the values of time keys are.
DURATION = re.compile(r"(?<![\w:.\-/])(\d+-)?(\d+:)?\d+:\d\d(?![\w:])")
DIGIT = re.compile(r"\d")
# A whole word that is an absolute path: a work directory, an output file.
ABSOLUTE_PATH = re.compile(r"(?<!\S)/\S*")


def nines(match: re.Match[str]) -> str:
    return DIGIT.sub("9", match.group(0))


@dataclass
class Normaliser:
    """What differs between the two sides by nature: their hosts and (should they differ) job ids."""

    hosts: list[str]
    emulator_job_ids: dict[str, str]

    def text(self, text: str, side: str, durations: bool = True) -> str:
        if side == "emulator" and self.emulator_job_ids:
            text = re.sub(
                r"\b(" + "|".join(map(re.escape, self.emulator_job_ids)) + r")\b",
                lambda match: self.emulator_job_ids[match.group(1)],
                text,
            )
        text = ABSOLUTE_PATH.sub("<path>", text)
        text = DATE.sub("YYYY-MM-DDThh:mm:ss", text)
        text = DATE_LINE.sub("Www Mmm dd hh:mm:ss yyyy", text)
        if durations:
            text = DURATION.sub(nines, text)
        for host in self.hosts:
            text = re.sub(r"(?<![\w.-])" + re.escape(host) + r"(?![\w.-])", "<host>", text)
        return text


# Keys of `scontrol show` whose values are the moment, the machine or the process, not the form.
VOLATILE_KEYS = {
    "AllocNode:Sid", "Arch", "BootTime", "Command", "CPULoad", "EligibleTime", "EndTime", "FreeMem",
    "LastBusyTime", "LastSchedEval", "NodeAddr", "NodeHostName", "OS", "Port", "Priority", "AccrueTime",
    "RunTime", "SlurmdStartTime", "StartTime", "StdErr", "StdIn", "StdOut", "SubmitTime", "Version",
    "WorkDir", "PreemptEligibleTime", "PreemptTime", "ResumeAfterTime", "SuspendTime", "Deadline",
}
KEEP_AS_IS = {"", "Unknown", "None", "(null)", "N/A", "n/a", "NONE", "UNLIMITED"}


def volatile_value(key: str, value: str) -> str:
    if key not in VOLATILE_KEYS or value.strip() in KEEP_AS_IS:
        return value
    if DATE.fullmatch(value.strip()) or value.strip() == "YYYY-MM-DDThh:mm:ss":
        return "<date>"
    return "<v>"


# --- units of difference ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One difference: its text on the real side and on the emulator's (None: that side lacks it)."""

    command: str
    real: str | None
    emulator: str | None

    def show(self) -> str:
        return f"real: {self.real!r} | emulator: {self.emulator!r}"


def line_units(
    command: str, real: list[str], emulator: list[str], prefix: str = "", paired: bool = True
) -> list[Unit]:
    """The lines (or names) only one side has; with `paired`, a changed line is one unit of both."""
    units = []
    matcher = difflib.SequenceMatcher(a=real, b=emulator, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        ours, theirs = real[a0:a1], emulator[b0:b1]
        if not paired:
            units.extend(Unit(command, prefix + line, None) for line in ours)
            units.extend(Unit(command, None, prefix + line) for line in theirs)
            continue
        for index in range(max(len(ours), len(theirs))):
            units.append(
                Unit(
                    command,
                    prefix + ours[index] if index < len(ours) else None,
                    prefix + theirs[index] if index < len(theirs) else None,
                )
            )
    return units


KEY_START = re.compile(r"(?:(?<=^)|(?<= ))(?=[A-Za-z][\w/:.()\-*]*=)")


def key_value_records(text: str) -> list[list[tuple[list[tuple[str, str]], bool]]]:
    """`scontrol show` records: each a list of lines, each line its (key, value) pairs and
    whether it ends with a space."""
    records, lines = [], []
    for line in text.split("\n"):
        if not line.strip():
            if lines:
                records.append(lines)
                lines = []
            continue
        body = line.lstrip(" ")
        pairs = []
        for token in KEY_START.split(body):
            if not token:
                continue
            key, _, value = token.partition("=")
            pairs.append((key, value.rstrip(" ") if token.endswith(" ") else value))
        # A value of only spaces (`Power=`) is the key's, not a trailing space.
        lines.append((pairs, line.endswith(" ")))
    if lines:
        records.append(lines)
    return records


def key_value_units(command: str, real: str, emulator: str) -> list[Unit]:
    units = []
    real_records, emulator_records = key_value_records(real), key_value_records(emulator)
    if len(real_records) != len(emulator_records):
        units.append(Unit(command, f"records: {len(real_records)}", f"records: {len(emulator_records)}"))
    for ours, theirs in zip(real_records, emulator_records):
        units.extend(record_units(command, ours, theirs))
    # The lines between records: empty, or (Slurm 22.05's job records) three spaces.
    units.extend(
        line_units(
            command,
            [repr(line) for line in real.split("\n")[:-1] if not line.strip()],
            [repr(line) for line in emulator.split("\n")[:-1] if not line.strip()],
            prefix="blank line ",
        )
    )
    return units


def record_units(command: str, real: list, emulator: list) -> list[Unit]:
    def flat(lines: list) -> tuple[list[str], dict[str, str], set[str], set[str]]:
        keys, values, line_starts, trailing = [], {}, set(), set()
        for pairs, trailing_space in lines:
            for index, (key, value) in enumerate(pairs):
                keys.append(key)
                values[key] = volatile_value(key, value)
                if index == 0:
                    line_starts.add(key)
            if pairs and trailing_space:
                trailing.add(pairs[0][0])
        return keys, values, line_starts, trailing

    real_keys, real_values, real_starts, real_trailing = flat(real)
    emulator_keys, emulator_values, emulator_starts, emulator_trailing = flat(emulator)
    units = []
    matcher = difflib.SequenceMatcher(a=real_keys, b=emulator_keys, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            for key in real_keys[a0:a1]:
                if real_values[key] != emulator_values[key]:
                    units.append(Unit(command, f"{key}={real_values[key]}", f"{key}={emulator_values[key]}"))
            continue
        for key in real_keys[a0:a1]:
            units.append(Unit(command, f"{key}={real_values[key]}", None))
        for key in emulator_keys[b0:b1]:
            units.append(Unit(command, None, f"{key}={emulator_values[key]}"))
    common = set(real_keys) & set(emulator_keys)
    for key in sorted((real_starts ^ emulator_starts) & common):
        mark = f"line starts at {key}"
        units.append(Unit(command, mark if key in real_starts else None, mark if key in emulator_starts else None))
    for key in sorted((real_trailing ^ emulator_trailing) & common):
        mark = f"trailing space on the line of {key}"
        units.append(Unit(command, mark if key in real_trailing else None, mark if key in emulator_trailing else None))
    return units


CONFIG_LINE = re.compile(r"^(\S+)( +)= ")


def config_units(command: str, real: str, emulator: str) -> list[Unit]:
    """`scontrol show config`: the keys and their order, the column of `=`, the other lines; the
    values are each side's own configuration."""

    def parse(text: str) -> tuple[list[str], set[int], list[str]]:
        keys, columns, others = [], set(), []
        for line in text.split("\n"):
            match = CONFIG_LINE.match(line)
            if match:
                keys.append(match.group(1))
                columns.add(len(match.group(1)) + len(match.group(2)))
            else:
                others.append(line)
        return keys, columns, others

    real_keys, real_columns, real_others = parse(real)
    emulator_keys, emulator_columns, emulator_others = parse(emulator)
    units = line_units(command, real_keys, emulator_keys, prefix="key ", paired=False)
    if real_columns != emulator_columns:
        units.append(Unit(command, f"= at {sorted(real_columns)}", f"= at {sorted(emulator_columns)}"))
    units.extend(line_units(command, real_others, emulator_others))
    return units


def words_units(command: str, real: str, emulator: str) -> list[Unit]:
    """A list of names laid out in columns (`sacct -e`): the names, and the columns they start at."""

    def starts(text: str) -> set[int]:
        return {match.start() for line in text.split("\n") for match in re.finditer(r"\S+", line)}

    units = line_units(command, real.split(), emulator.split(), prefix="name ", paired=False)
    if starts(real) != starts(emulator):
        units.append(Unit(command, f"columns at {sorted(starts(real))}", f"columns at {sorted(starts(emulator))}"))
    return units


def sorted_rows(lines: list[str]) -> list[str]:
    header = [line for line in lines[:2] if not line.startswith("slurm-")]
    return header + sorted(lines[len(header):])


def output_kind(command: str) -> str:
    words = command.split()
    if words[0] == "scontrol" and "show" in words:
        entity = words[words.index("show") + 1] if words.index("show") + 1 < len(words) else ""
        if entity == "config":
            return "config"
        if entity in {"job", "node", "partition"}:
            return "keyvalue"
    if words[0] == "sacct" and ("-e" in words or "--helpformat" in words):
        return "words"
    return "text"


def units_of(command: str, real: dict, emulator: dict, normaliser: Normaliser) -> list[Unit]:
    units = []
    if real["status"] != emulator["status"]:
        units.append(Unit(command, f"exit {real['status']}", f"exit {emulator['status']}"))
    kind = output_kind(command)
    # `Key=value` lines: durations are the values of known keys (RunTime=), and `ExitCode=0:15` keeps
    # its signal.
    durations = kind != "keyvalue"
    real_out = normaliser.text(real["stdout"], "real", durations)
    emulator_out = normaliser.text(emulator["stdout"], "emulator", durations)
    if kind == "keyvalue":
        units.extend(key_value_units(command, real_out, emulator_out))
    elif kind == "config":
        units.extend(config_units(command, real_out, emulator_out))
    elif kind == "words":
        units.extend(words_units(command, real_out, emulator_out))
    else:
        real_lines, emulator_lines = real_out.split("\n"), emulator_out.split("\n")
        if command.split()[0] == "sinfo" and "-N" in command.split():
            # One row per node and partition: real Slurm orders a node's partitions differently
            # from run to run, so both sides' rows are compared sorted (the header stays first).
            real_lines, emulator_lines = sorted_rows(real_lines), sorted_rows(emulator_lines)
        units.extend(line_units(command, real_lines, emulator_lines))
    units.extend(
        line_units(
            command,
            normaliser.text(real["stderr"], "real").splitlines(),
            normaliser.text(emulator["stderr"], "emulator").splitlines(),
            prefix="stderr: ",
        )
    )
    return units


# --- the divergence list ---------------------------------------------------------------------------


@dataclass
class Divergence:
    index: int
    kind: str
    commands: list[str]
    real: re.Pattern[str] | None
    emulator: re.Pattern[str] | None
    reason: str

    def explains(self, unit: Unit) -> bool:
        return (
            unit.command in self.commands
            and side_matches(self.real, unit.real)
            and side_matches(self.emulator, unit.emulator)
        )


def side_matches(pattern: re.Pattern[str] | None, text: str | None) -> bool:
    if pattern is None or text is None:
        return pattern is None and text is None
    return pattern.fullmatch(text) is not None


def load_divergences(path: Path, commands: list[str]) -> list[Divergence]:
    document = tomllib.loads(path.read_text())
    divergences = []
    for index, entry in enumerate(document.get("divergence", []), start=1):
        where = f"{path.name} entry {index}"
        kind = entry.get("kind")
        if kind not in {"version", "setup", "bug"}:
            raise SystemExit(f"{where}: kind must be version, setup or bug, not {kind!r}")
        if not entry.get("reason"):
            raise SystemExit(f"{where}: needs a reason")
        if kind in {"version", "setup"} and not entry.get("source"):
            raise SystemExit(f"{where}: a {kind} divergence cites Slurm's source (source = ...)")
        if kind == "bug" and not entry.get("item"):
            raise SystemExit(f"{where}: a bug names its issue item (item = ...)")
        if "real" not in entry and "emulator" not in entry:
            raise SystemExit(f"{where}: needs real or emulator (or both)")
        listed = entry.get("commands") or [entry.get("command")]
        for command in listed:
            if command not in commands:
                raise SystemExit(f"{where}: {command!r} is not a line of commands.txt")
        divergences.append(
            Divergence(
                index,
                kind,
                listed,
                re.compile(entry["real"]) if "real" in entry else None,
                re.compile(entry["emulator"]) if "emulator" in entry else None,
                entry["reason"],
            )
        )
    return divergences


def compare(args: argparse.Namespace) -> int:
    real = json.loads((Path(args.real) / "results.json").read_text())
    emulator = json.loads((Path(args.emulator) / "results.json").read_text())
    commands = command_lines(Path(args.commands))
    divergences = load_divergences(Path(args.divergences), commands)
    emulator_job_ids = {
        str(emulator["job_ids"][role]): str(real["job_ids"][role])
        for role in real["job_ids"]
        if emulator["job_ids"].get(role) != real["job_ids"][role]
    }
    normaliser = Normaliser(args.host or [], emulator_job_ids)

    used = set()
    matching = explained = 0
    unexplained_total = 0
    for real_result, emulator_result in zip(real["results"], emulator["results"]):
        command = real_result["command"]
        units = units_of(command, real_result, emulator_result, normaliser)
        if not units:
            matching += 1
            continue
        unexplained = []
        for unit in units:
            explaining = [each for each in divergences if each.explains(unit)]
            used.update(each.index for each in explaining)
            if not explaining:
                unexplained.append(unit)
        if not unexplained:
            explained += 1
            if not args.verbose:
                continue
        unexplained_total += len(unexplained)
        print(f"=== {command}: {len(units)} difference(s), {len(unexplained)} not in the list")
        for unit in unexplained:
            print(f"  NOT LISTED {unit.show()}")
        for side, result in (("real", real_result), ("emulator", emulator_result)):
            print(f"  --- {side} (exit {result['status']}; stdout |, stderr !)")
            for stream, mark in (("stdout", "|"), ("stderr", "!")):
                if result[stream]:
                    for line in result[stream].rstrip("\n").split("\n"):
                        print(f"  {mark} {line}")
    stale = [each for each in divergences if each.index not in used]
    for each in stale:
        print(f"=== divergences.toml entry {each.index} ({each.kind}: {each.reason[:80]}) no longer occurs")
    total = len(real["results"])
    print(
        f"slurm-parity: {matching} of {total} command forms match, {explained} explained by the "
        f"divergence list, {total - matching - explained} not; {len(stale)} stale list entries"
    )
    return 1 if unexplained_total or stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    runner = sub.add_parser("run", help="run the command lines on one side")
    runner.add_argument("--commands", required=True)
    runner.add_argument("--job-ids", required=True, help="JSON: job role -> id on this side")
    runner.add_argument("--out", required=True)
    comparer = sub.add_parser("compare", help="compare the two sides")
    comparer.add_argument("--real", required=True)
    comparer.add_argument("--emulator", required=True)
    comparer.add_argument("--commands", required=True)
    comparer.add_argument("--divergences", required=True)
    comparer.add_argument("--host", action="append", help="a host name either side prints")
    comparer.add_argument("--verbose", action="store_true", help="also show the explained commands")
    args = parser.parse_args()
    return run(args) if args.action == "run" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
