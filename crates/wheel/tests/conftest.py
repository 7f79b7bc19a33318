"""The plugin's own tests. They run from a venv the wheel is installed in (scripts/test), so the
package under test is the installed one: `test_package.py` checks that."""

import os

pytest_plugins = ["pytester"]

# Sandboxes of these tests carry it in their environment, to find their processes.
MARK = "CWSANDBOX_PLUGIN_TEST"


def processes_with(name: str, value: str) -> list:
    """Living processes (any pid namespace) whose environment has name=value."""
    wanted = f"{name}={value}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if wanted in environ and state != "Z":
            found.append(int(pid))
    return found
