"""The context manager: start on a free port, the ready file, the operator's helpers, the stop
and its orphan check."""

import os
import subprocess
import urllib.error
import urllib.request
import uuid

import pytest
from conftest import MARK, processes_with

from cwsandbox import Sandbox
from cwsandbox_emulator import Emulator, EmulatorApiError, EmulatorError, OrphanError


def test_starts_on_a_free_port_and_stops_with_sigterm(monkeypatch):
    with Emulator() as emu:
        assert emu.base_url.startswith("http://127.0.0.1:")
        assert not emu.base_url.endswith(":0")
        assert emu.admin_token and emu.user_token and emu.runner_id
        assert os.path.exists(emu.kubeconfig)
        # The dashboard's page is served without a token; its data needs one.
        with urllib.request.urlopen(emu.dashboard_url) as page:
            assert b'name="token"' in page.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(emu.base_url + "/ui/api/view/cluster")
        assert refused.value.code == 401
        assert emu.isolation in ("namespaces", "plain")
        assert emu.running
        directory = emu.dir
        sandboxes = emu.sandbox_root
        # Sandbox roots live in memory where /dev/shm is a tmpfs that allows executing files.
        with open("/proc/mounts") as mounts:
            shm = [line.split() for line in mounts if line.split()[1] == "/dev/shm"]
        if shm and shm[-1][2] == "tmpfs" and "noexec" not in shm[-1][3].split(",") and os.access("/dev/shm", os.W_OK):
            assert str(sandboxes).startswith("/dev/shm/"), sandboxes
        else:
            assert sandboxes.parent == directory
        for name, value in emu.env().items():
            monkeypatch.setenv(name, value)
        # A program the sandbox writes runs: its root's file system allows executing files.
        script = "printf '#!/bin/sh\\necho ran\\n' > /tmp/run.sh && chmod +x /tmp/run.sh && /tmp/run.sh"
        with Sandbox.run(placement_mode="cks", runner_ids=[emu.runner_id]) as sb:
            assert sb.exec(["sh", "-c", script]).result().stdout.strip() == "ran"
        assert sandboxes.is_dir()
    assert not emu.running
    # Nothing of the run is left behind.
    assert not directory.exists()
    assert not sandboxes.parent.exists()


def test_two_emulators_at_once_do_not_share_anything():
    with Emulator() as one, Emulator() as two:
        assert one.base_url != two.base_url
        assert one.admin_token != two.admin_token


def test_the_clock_freezes_advances_and_resumes():
    with Emulator() as emu:
        frozen_at = emu.clock.freeze()
        assert emu.clock.frozen
        assert emu.clock.now() == frozen_at
        later = emu.clock.advance(90)
        assert (later - frozen_at).total_seconds() == 90
        assert emu.clock.advance(0.5) > later
        emu.clock.resume()
        assert not emu.clock.frozen


def test_values_are_applied_as_dicts_and_yaml_and_bad_ones_are_refused():
    with Emulator(values={"sandboxes": {"retentionSeconds": 123}}) as emu:
        assert emu.values()["sandboxes"]["retentionSeconds"] == 123
        applied = emu.apply_values("sandboxes:\n  retentionSeconds: 77\n")
        assert applied["sandboxes"]["retentionSeconds"] == 77
        with pytest.raises(EmulatorApiError) as refused:
            emu.apply_values({"sandboxes": {"retentionSeconds": "soon"}})
        assert refused.value.code == "invalid_argument"
        assert "retentionSeconds" in refused.value.message


def test_api_errors_carry_the_connect_code_and_message():
    with Emulator() as emu:
        from cwsandbox_emulator import ConnectClient

        with pytest.raises(EmulatorApiError) as unknown_token:
            ConnectClient(emu.base_url, "not-a-token").call("GetClock")
        assert unknown_token.value.code == "unauthenticated"
        assert unknown_token.value.message
        with pytest.raises(EmulatorApiError) as user:
            ConnectClient(emu.base_url, emu.user_token).call("FreezeClock")
        assert user.value.code == "permission_denied"


def test_a_start_that_fails_reports_the_emulators_output():
    with pytest.raises(EmulatorError) as failed:
        Emulator(values=["/nonexistent/values.yaml"]).start()
    assert "/nonexistent/values.yaml" in str(failed.value)


def test_unknown_settings_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="timing"):
        Emulator(timing="slow")
    with pytest.raises(ValueError, match="scenario"):
        Emulator(scenario="empty")
    with pytest.raises(ValueError, match="runtime"):
        Emulator(runtime="docker")


def test_the_runtime_is_the_host_processes_unless_the_user_chose_one(monkeypatch):
    monkeypatch.delenv("CWSANDBOX_EMULATOR_RUNTIME", raising=False)
    # On a machine with runc the binary's own default (`auto`) would run images: the helper's is
    # the host's programs, so a suite is as instant and offline here as anywhere.
    with Emulator() as emu:
        assert emu.runtime == "process"
        assert emu.container_runtime == "process"
    # The user's variable is their choice: no --runtime overrides it. `oci` with a runc that does
    # not exist fails to start, on any machine, naming the runtime it was told to use.
    missing_runc = {"containerRuntime": {"runc": "/nonexistent/runc"}}
    for emulator in (
        Emulator(values=missing_runc, env={"CWSANDBOX_EMULATOR_RUNTIME": "oci"}),
        Emulator(values=missing_runc, runtime="oci"),
    ):
        with pytest.raises(EmulatorError, match="runc"):
            emulator.start()
    assert Emulator(env={"CWSANDBOX_EMULATOR_RUNTIME": "oci"}).runtime is None
    monkeypatch.setenv("CWSANDBOX_EMULATOR_RUNTIME", "auto")
    assert Emulator().runtime is None
    assert Emulator(runtime="process").runtime == "process"


def test_sandboxes_left_running_end_with_the_emulator(monkeypatch):
    mark = uuid.uuid4().hex
    with Emulator() as emu:
        for name, value in emu.env().items():
            monkeypatch.setenv(name, value)
        sandbox = Sandbox.run(
            "sleep", "600", placement_mode="cks", runner_ids=[emu.runner_id], environment_variables={MARK: mark}
        )
        assert sandbox.exec(["true"]).result().returncode == 0
        assert processes_with(MARK, mark)
        jobs = emu.slurm.jobs()
        assert any(sandbox.sandbox_id in job["name"] and job["state"] == "RUNNING" for job in jobs), jobs
        assert any(pod.get("origin", {}).get("sandboxId") == sandbox.sandbox_id for pod in emu.pods())
    # The stop's orphan check passed, and indeed nothing is left.
    assert processes_with(MARK, mark) == []


def test_the_orphan_check_fails_the_stop_when_a_process_survives():
    emu = Emulator().start()
    # A process living in the sandbox root, as a sandbox's process that escaped would.
    hideout = emu.sandbox_root / "escaped"
    hideout.mkdir(parents=True)
    survivor = subprocess.Popen(["sleep", "600"], cwd=hideout)
    try:
        with pytest.raises(OrphanError) as orphans:
            emu.stop()
        assert [p.pid for p in orphans.value.survivors] == [survivor.pid]
        assert f"pid {survivor.pid} sleep 600" in str(orphans.value)
        # The check killed it.
        assert survivor.wait(timeout=60) == -9
    finally:
        if survivor.poll() is None:
            survivor.kill()
            survivor.wait()


def test_jobs_are_the_accounting_rows_once_and_the_queue_on_request(monkeypatch):
    with Emulator() as emu:
        for name, value in emu.env().items():
            monkeypatch.setenv(name, value)
        with Sandbox.run(placement_mode="cks", runner_ids=[emu.runner_id]) as sb:
            assert sb.exec(["true"]).result().returncode == 0
            [accounted] = [job for job in emu.slurm.jobs() if sb.sandbox_id in job["name"]]
            [queued] = [job for job in emu.slurm.queue() if sb.sandbox_id in job["name"]]
            assert (accounted["source"], queued["source"]) == ("accounting", "queue")
            assert accounted["job_id"] == queued["job_id"]
            assert emu.slurm.jobs(states=["RUNNING"], job_ids=[accounted["job_id"]]) == [accounted]
            assert emu.slurm.jobs(states=["COMPLETED"], job_ids=[accounted["job_id"]]) == []


def test_an_emulator_never_stopped_is_killed_when_it_is_collected():
    import gc

    emu = Emulator().start()
    process = emu._process
    del emu
    gc.collect()
    assert process.poll() is not None


def test_a_gpu_sandbox_sees_the_gpus_its_slurm_job_holds(monkeypatch):
    from cwsandbox import ResourceOptions

    gpu_nodes = {
        "nodeSets": [
            {
                "name": "cpu",
                "replicas": 1,
                "cpu": "16",
                "memory": "64Gi",
                "gpus": 8,
                "gpuClass": "H100",
                "slurmd": {"requests": {"cpu": "1", "memory": "4Gi"}},
            }
        ],
        "scheduler": {"gpuTypes": {"H100": "h100"}},
    }
    with Emulator(values=gpu_nodes) as emu:
        monkeypatch.setenv("CWSANDBOX_BASE_URL", emu.base_url)
        monkeypatch.setenv("CWSANDBOX_API_KEY", emu.admin_token)
        two_gpus = ResourceOptions(
            requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}, gpu={"count": 2}
        )
        with Sandbox.run(placement_mode="cks", runner_ids=[emu.runner_id], resources=two_gpus) as sb:
            seen = sb.exec(["sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES"']).result().stdout.strip()
            [job] = [job for job in emu.slurm.jobs() if sb.sandbox_id in job["name"]]
        assert job["req_gpus"] == 2 and len(job["gpu_indices"]) == 2
        assert seen == ",".join(str(index) for index in job["gpu_indices"])
