"""Sandboxes in their container images, through the OCI runtime (runc), with the published client.

The Rust test `tests/python_images.rs` starts a local registry on loopback, pushes the testkit's
images to it (a busybox image, and one layered on it with whiteouts), starts the emulator with
`--runtime oci` and runs this module with `CWSANDBOX_TEST_REGISTRY` (`127.0.0.1:PORT`) and the
images' expected contents. Without that variable (the process-runtime suite) the module is
skipped: those emulators pull nothing.
"""

from __future__ import annotations

import os

import pytest

from cwsandbox import Container, ImagePullCredentials, ResourceOptions, Sandbox
from cwsandbox.exceptions import SandboxFailedError
from conftest import RUNNER, WAIT, processes_with, run, sandbox_env

REGISTRY = os.environ.get("CWSANDBOX_TEST_REGISTRY", "")
pytestmark = pytest.mark.skipif(not REGISTRY, reason="needs the OCI runtime run (tests/python_images.rs)")

BUSYBOX = f"{REGISTRY}/test/busybox:1"
LAYERED = f"{REGISTRY}/test/layered:1"
# A registry that answers only with the credentials of the values' store `registry-credentials`.
PRIVATE = os.environ.get("CWSANDBOX_TEST_PRIVATE_REGISTRY", "")


def expected(name: str) -> str:
    return os.environ[f"CWSANDBOX_TEST_IMAGE_{name}"]


def sh(sb, script: str):
    return sb.exec(["sh", "-c", script]).result(timeout=WAIT)


@pytest.fixture
def busybox(mark):
    sb = run(mark=mark, container_image=BUSYBOX)
    sb.wait(timeout=WAIT)
    yield sb
    sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def test_commands_see_the_images_files_not_the_hosts(busybox):
    release = busybox.exec(["cat", "/etc/os-release"]).result(timeout=WAIT)
    assert release.returncode == 0, release.stderr
    assert release.stdout == expected("OS_RELEASE")
    with open("/etc/os-release") as host:
        assert release.stdout != host.read()
    # Nothing of the host's filesystem but what a container gets: no /usr/bin/python3, no /home.
    listing = sh(busybox, "ls /; test -e /usr/bin/python3 && echo host-python; test -e /work && echo host-work")
    assert "host-python" not in listing.stdout and "host-work" not in listing.stdout, listing.stdout
    image_dirs = {"app", "bin", "data", "etc", "home", "root", "tmp", "usr", "var"}
    assert set(listing.stdout.split()) <= image_dirs | {"dev", "proc", "sys"}, listing.stdout


def test_the_images_env_and_working_directory_apply(busybox):
    result = sh(busybox, 'echo "$GREETING"; pwd; cat hello.txt >/dev/null && echo found')
    assert result.stdout.splitlines() == [expected("GREETING"), expected("WORKDIR"), "found"], result
    # The hostname is the Pod's name, inside the container's own UTS namespace.
    assert sh(busybox, "hostname").stdout.strip() == f"sandbox-{busybox.sandbox_id}"


def test_a_file_one_sandbox_writes_is_invisible_to_another_of_the_same_image(busybox, mark):
    assert sh(busybox, "echo mine > /etc/written && rm /etc/motd && echo done").stdout == "done\n"
    other = run(mark=mark, container_image=BUSYBOX)
    try:
        other.wait(timeout=WAIT)
        seen = sh(other, "test -e /etc/written && echo leaked; cat /etc/motd")
        assert seen.stdout == expected("BASE_MOTD"), seen
    finally:
        other.stop(missing_ok=True).result()


def test_layers_apply_whiteouts_and_opaque_directories(mark):
    sb = run(mark=mark, container_image=LAYERED)
    try:
        sb.wait(timeout=WAIT)
        result = sh(sb, "cat /etc/motd; test -e /etc/remove-me && echo not-removed; ls -A /data; pwd")
        assert result.stdout.splitlines() == [expected("LAYERED_MOTD").strip(), "new", "/data"], result
    finally:
        sb.stop(missing_ok=True).result()


def test_files_and_exit_codes_work_inside_the_container(busybox):
    busybox.write_file("/tmp/in.txt", b"written by the client").result(timeout=WAIT)
    assert sh(busybox, "cat /tmp/in.txt").stdout == "written by the client"
    assert busybox.read_file("/etc/os-release").result(timeout=WAIT) == expected("OS_RELEASE").encode()
    missing = busybox.exec(["no-such-program"]).result(timeout=WAIT)
    assert missing.returncode == 127, missing
    assert sh(busybox, "exit 3").returncode == 3


def test_a_private_image_runs_with_the_sandboxs_pull_credentials_and_only_with_them(mark):
    # Issue 34 item 9: image_pull_credentials name a secret of the organization's store, in either
    # form: fields username and password, or a docker config.json.
    image = f"{PRIVATE}/test/private:1"
    for name in ["login", "config-json"]:
        credentials = ImagePullCredentials(registry=PRIVATE, store="registry-credentials", name=name)
        sb = run(mark=mark, container_image=image, image_pull_credentials=credentials)
        sb.wait(timeout=WAIT)
        assert sh(sb, "cat /etc/motd").stdout == expected("PRIVATE_MOTD")
        sb.stop().result()
    # The image is in the cache now, but not for a sandbox without the credentials, nor with
    # wrong ones: the registry is asked, and refuses them.
    for credentials in [None, ImagePullCredentials(registry=PRIVATE, store="registry-credentials", name="wrong")]:
        with pytest.raises(SandboxFailedError) as failed:
            run(mark=mark, container_image=image, image_pull_credentials=credentials).wait(timeout=WAIT)
        reason = failed.value.status_reason or ""
        assert "ImagePullBackOff" in reason and "pull access denied" in reason, reason


def test_an_unknown_tag_fails_with_image_pull_back_off_and_the_registrys_message(mark):
    with pytest.raises(SandboxFailedError) as failed:
        run(mark=mark, container_image=f"{REGISTRY}/test/busybox:no-such-tag").wait(timeout=WAIT)
    reason = failed.value.status_reason or ""
    assert "ImagePullBackOff" in reason, reason
    assert "no-such-tag" in reason and "not found" in reason, reason


def test_a_memory_limit_is_enforced_where_cgroups_allow(mark):
    if os.environ.get("CWSANDBOX_TEST_CGROUP_LIMITS") != "1":
        pytest.skip("this host lets the OCI runtime set no cgroup limits (said in the emulator's log)")
    hog = "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived"
    sb = run(
        "/bin/sh",
        "-c",
        hog,
        mark=mark,
        container_image=BUSYBOX,
        resources=ResourceOptions(requests={"memory": "32Mi"}, limits={"memory": "64Mi"}),
    )
    with pytest.raises(SandboxFailedError) as failed:
        sb.wait_until_complete(timeout=WAIT).result()
    assert "OOMKilled" in (failed.value.status_reason or ""), failed.value.status_reason


def test_a_pods_containers_each_run_in_their_image_with_a_root_of_their_own(mark):
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    main = Container(
        name="main",
        primary=True,
        image=BUSYBOX,
        command="sh",
        args=["-c", "echo main up; exec sleep 1000"],
        environment_variables=sandbox_env(mark, ROLE="main"),
        resources=resources,
    )
    helper = Container(
        name="helper",
        image=LAYERED,
        command="sh",
        args=["-c", "echo helper up; exec sleep 1000"],
        environment_variables=sandbox_env(mark, ROLE="helper"),
        resources=resources,
    )
    with Sandbox.run(containers=[main, helper], placement_mode="cks", runner_ids=[RUNNER]) as sb:
        sb.wait(timeout=WAIT)
        # Each its image: the layered image's motd in the helper, the base one in main.
        assert sh(sb, "cat /etc/motd").stdout == expected("BASE_MOTD")
        in_helper = sb.exec(["sh", "-c", "cat /etc/motd; echo $ROLE"], container="helper").result(timeout=WAIT)
        assert in_helper.stdout.splitlines() == [expected("LAYERED_MOTD").strip(), "helper"], in_helper
        # A root of its own: main's file is not the helper's, in exec as through the API.
        sb.write_file("/tmp/main-only", b"main").result(timeout=WAIT)
        assert sb.exec(["cat", "/tmp/main-only"], container="helper").result(timeout=WAIT).returncode == 1
        sb.write_file("/tmp/helper-only", b"helper", container="helper").result(timeout=WAIT)
        assert sb.read_file("/tmp/helper-only", container="helper").result(timeout=WAIT) == b"helper"
        assert sh(sb, "test -e /tmp/helper-only && echo leaked; echo checked").stdout == "checked\n"
        # The Pod's hostname, and each container's log.
        hostname = sb.exec(["hostname"], container="helper").result(timeout=WAIT).stdout.strip()
        assert hostname == f"sandbox-{sb.sandbox_id}"
    assert processes_with(mark) == []
