"""RuntimeClasses through the published client: `runtime_class="gvisor"` runs the sandbox under
gVisor's runsc where the emulator can (its ready file's `runtime_classes`), on gVisor's own kernel,
with execs, files and its end as any sandbox's; a class the policy admits but no Node has is
refused as the fleet refuses a sandbox no runner can host. The runner's policy admits both
(values.yaml)."""

from __future__ import annotations

import os
import time

import pytest

from cwsandbox import SandboxError

from conftest import WAIT, emulator, run

RUNTIME_CLASSES = os.environ.get("CWSANDBOX_RUNTIME_CLASSES", "").split()
GVISOR = "gvisor" in RUNTIME_CLASSES


def runsc_processes() -> set[int]:
    """The host's runsc processes (gVisor's sandbox kernel, its file server, `runsc run`)."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if os.path.basename(argv0).startswith(b"runsc"):
            found.add(int(name))
    return found


@pytest.mark.skipif(not GVISOR, reason="gVisor's runsc does not work here (the ready file's `unavailable` says why)")
def test_a_gvisor_sandbox_runs_on_gvisors_kernel_and_leaves_nothing_behind(mark):
    before = runsc_processes()
    with run("sleep", "infinity", runtime_class="gvisor", mark=mark) as sb:
        sb.wait(timeout=WAIT)
        assert sb.effective_runtime_class == "gvisor"
        version = sb.exec(["cat", "/proc/version"]).result()
        assert version.returncode == 0, version.stderr
        assert "Linux version 4.4.0" in version.stdout, version.stdout
        with open("/proc/version") as f:
            assert version.stdout.strip() != f.read().strip(), "the host's kernel answered"
        assert runsc_processes() - before, "no runsc process runs the sandbox"
        # The Pod says which RuntimeClass runs it, as `kubectl get pod -o yaml` does.
        [pod] = emulator("ListPods", {"labelSelector": f"sandbox.coreweave.com/sandbox-id={sb.sandbox_id}"})["pods"]
        assert pod["spec"]["extra"]["runtimeClassName"] == "gvisor", pod["spec"]
        # Files through the API land in gVisor's own view, and back.
        sb.write_file("/tmp/in-gvisor/note.txt", b"written through the API").result()
        cat = sb.exec(["cat", "/tmp/in-gvisor/note.txt"]).result()
        assert cat.stdout == "written through the API"
        sb.exec(["sh", "-c", "echo from the sandbox > /tmp/back.txt"]).result()
        assert sb.read_file("/tmp/back.txt").result() == b"from the sandbox\n"
        missing = sb.exec(["no-such-command"]).result()
        assert missing.returncode == 127, missing
    # Deleted: gVisor's processes of it are gone.
    deadline = time.monotonic() + WAIT
    while runsc_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runsc_processes() - before, "gVisor's processes outlived their sandbox"


def test_a_runtime_class_no_node_has_is_refused_as_no_runner_can_host_it(mark):
    with pytest.raises(SandboxError) as raised:
        run("sleep", "infinity", runtime_class="kata", mark=mark).wait(timeout=WAIT)
    assert raised.value.reason == "CWSANDBOX_NO_SUITABLE_RUNNER", raised.value
    assert "kata" in str(raised.value), raised.value
