"""Holds N sandboxes open with the published client, then prints the proportional set size of
the emulator and of its descendants by process name. Usage: sandbox_memory.py EMULATOR_PID
RUNNER_ID N (CWSANDBOX_BASE_URL and CWSANDBOX_API_KEY set)."""

import os
import sys

from cwsandbox import Sandbox


def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found += [int(child) for child in listing.read().split()]
        except OSError:
            pass
    return found


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    emulator, runner, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    boxes = [Sandbox.run(placement_mode="cks", runner_ids=[runner]) for _ in range(count)]
    try:
        for box in boxes:
            box.exec(["true"]).result()
        pending, descendants = children(emulator), []
        while pending:
            pid = pending.pop()
            descendants.append(pid)
            pending += children(pid)
        by_name = {}
        for pid in descendants:
            try:
                with open(f"/proc/{pid}/comm") as comm:
                    name = comm.read().strip()
            except OSError:
                continue
            processes, kib = by_name.get(name, (0, 0))
            by_name[name] = (processes + 1, kib + pss_kib(pid))
        print(f"{count} sandboxes held; emulator: {pss_kib(emulator)} KiB")
        for name, (processes, kib) in sorted(by_name.items()):
            print(f"{name}: {processes} processes, {kib} KiB")
        print(f"descendants: {sum(kib for _, kib in by_name.values())} KiB")
    finally:
        for box in boxes:
            box.stop().result()


main()
