"""Run inside a sandbox: scans every process it can see (environment, command line, memory)
for the needles given as arguments, skipping itself; prints `pid:where` per hit, then `scanned`.
Shared by the executor's isolation tests and the emulator's Python hardening tests."""
import os, sys
needles = [arg.encode() for arg in sys.argv[1:]]
me = os.getpid()
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid == me:
        continue
    for name in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{name}", "rb").read()
        except OSError:
            continue
        for needle in needles:
            if needle in data:
                print(f"{pid}:{name}")
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    for line in maps:
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        for needle in needles:
            if needle in chunk:
                print(f"{pid}:mem")
print("scanned")
