"""Processes in `/proc` (Linux), for the orphan check: the descendants of the emulator before it
stops, and processes that live in its sandbox root. The same check as the Rust harness
(crates/testkit/src/procs.rs): a process is its pid and start time, so a reused pid is not it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Process:
    pid: int
    # Clock ticks after boot (`/proc/PID/stat` field 22).
    start_time: int
    command: str

    def is_alive(self) -> bool:
        """Same pid, same start time, and not a zombie (a zombie is dead, waiting to be reaped)."""
        found = _stat(self.pid)
        return found is not None and found[2] == self.start_time and found[1] != "Z"

    def __str__(self) -> str:
        return f"pid {self.pid} {self.command}"


def _stat(pid: int) -> Optional[Tuple[int, str, int]]:
    """(parent pid, state, start time)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: the fields follow the last ')'.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1]), fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _pids() -> List[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _process(pid: int) -> Optional[Process]:
    found = _stat(pid)
    if found is None:
        return None
    return Process(pid, found[2], _command(pid))


def descendants(root: int) -> List[Process]:
    """Every living descendant of `root`, not `root` itself."""
    children: Dict[int, List[int]] = {}
    for pid in _pids():
        found = _stat(pid)
        if found is not None and found[1] != "Z":
            children.setdefault(found[0], []).append(pid)
    result: List[Process] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            process = _process(child)
            if process is not None:
                result.append(process)
            queue.append(child)
    return result


def _under(link: str, directory: str) -> bool:
    try:
        target = os.readlink(link)
    except OSError:
        return False
    return target == directory or target.startswith(directory.rstrip("/") + "/")


def in_directory(directory: str) -> List[Process]:
    """Living processes whose working directory or root is `directory` or below it: a sandbox's
    processes (plain mode runs them in their sandbox's directory, namespaces mode roots them there),
    even one that left the emulator's process tree."""
    directory = os.path.realpath(directory)
    found = []
    for pid in _pids():
        if _under(f"/proc/{pid}/cwd", directory) or _under(f"/proc/{pid}/root", directory):
            process = _process(pid)
            if process is not None and process.is_alive():
                found.append(process)
    return found
