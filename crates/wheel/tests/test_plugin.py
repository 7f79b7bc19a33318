"""The pytest plugin, through inner pytest runs (pytester, in a subprocess as a user runs it):
the fixtures, the options, tenants, the target mode and the session's orphan check."""

import os
import textwrap

import pytest

from cwsandbox_emulator import Emulator, EmulatorApiError


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args)


def test_the_fixtures_give_each_test_a_tenant_of_one_emulator(pytester):
    pytester.makepyfile(
        textwrap.dedent(
            """
            import os
            import pytest
            from cwsandbox import Sandbox

            seen = {}

            def test_one(cwsandbox_emulator, cwsandbox_tenant):
                seen["emulator"] = cwsandbox_emulator.base_url
                seen["org"] = cwsandbox_tenant.organization
                assert os.environ["CWSANDBOX_BASE_URL"] == cwsandbox_emulator.base_url
                assert os.environ["CWSANDBOX_API_KEY"] == cwsandbox_tenant.user_token
                assert cwsandbox_tenant.admin_token not in (cwsandbox_tenant.user_token, cwsandbox_emulator.admin_token)
                with Sandbox.run(placement_mode="cks", runner_ids=[cwsandbox_tenant.runner_id]) as sb:
                    assert sb.exec(["echo", "hi"]).result().stdout == "hi\\n"
                    assert [job["name"] for job in cwsandbox_tenant.slurm.jobs() if sb.sandbox_id in job["name"]]

            def test_two(cwsandbox_emulator, cwsandbox_tenant):
                assert cwsandbox_emulator.base_url == seen["emulator"]
                assert cwsandbox_tenant.organization != seen["org"]
                # The first test's tenant was deleted at its teardown.
                assert [t["organization"] for t in cwsandbox_emulator.tenants()] == [cwsandbox_tenant.organization]
                # The first test's sandbox is not this tenant's business.
                assert cwsandbox_tenant.slurm.jobs() == []
                assert Sandbox.list().result() == []

            @pytest.mark.cwsandbox_emulator_only
            def test_marked_runs_on_the_emulator(cwsandbox_tenant):
                assert cwsandbox_tenant.is_target is False
            """
        )
    )
    run(pytester).assert_outcomes(passed=3)


def test_tenants_do_not_see_each_other_and_are_deleted_at_teardown(cwsandbox_emulator, monkeypatch):
    from cwsandbox import Sandbox
    from cwsandbox_emulator import EmulatorApiError

    one = cwsandbox_emulator.create_tenant()
    two = cwsandbox_emulator.create_tenant()
    assert one.organization != two.organization
    for name, value in one.env().items():
        monkeypatch.setenv(name, value)
    sandbox = Sandbox.run(placement_mode="cks", runner_ids=[one.runner_id])
    try:
        assert sandbox.exec(["true"]).result().returncode == 0
        monkeypatch.setenv("CWSANDBOX_API_KEY", two.user_token)
        assert [sb.sandbox_id for sb in Sandbox.list().result()] == []
        assert two.pods() == [] or all(p.get("origin", {}).get("sandboxId") != sandbox.sandbox_id for p in two.pods())
        assert any(p.get("origin", {}).get("sandboxId") == sandbox.sandbox_id for p in one.pods())
    finally:
        one.delete()
        two.delete()
    with pytest.raises(EmulatorApiError) as gone:
        one.faults.list()
    assert gone.value.code == "unauthenticated"
    assert all(pod.get("origin", {}).get("sandboxId") != sandbox.sandbox_id for pod in cwsandbox_emulator.pods())


def test_tenant_helpers_scope_faults_and_reset_to_the_tenant(cwsandbox_emulator):
    one = cwsandbox_emulator.create_tenant()
    two = cwsandbox_emulator.create_tenant()
    try:
        fault = one.faults.add(method="CreateSandbox", code="UNAVAILABLE", times=1)
        assert fault["id"]
        assert [f["id"] for f in one.faults.list()] == [fault["id"]]
        assert two.faults.list() == []
        assert one.faults.hits("CreateSandbox") == 0
        one.reset()
        assert one.faults.list() == []
    finally:
        one.delete()
        two.delete()


def test_options_from_the_ini_file_and_the_command_line(pytester):
    pytester.makefile(".yaml", values="sandboxes:\n  retentionSeconds: 321\n")
    pytester.makeini("[pytest]\ncwsandbox_values = values.yaml\ncwsandbox_scenario = fresh\n")
    pytester.makepyfile(
        textwrap.dedent(
            """
            def test_values_and_scenario(cwsandbox_emulator, request):
                assert cwsandbox_emulator.values()["sandboxes"]["retentionSeconds"] == 321
                assert cwsandbox_emulator.scenario == "fresh"
                assert cwsandbox_emulator.timing == (request.config.getoption("cwsandbox_timing") or "instant")
                assert cwsandbox_emulator.runtime == (request.config.getoption("cwsandbox_runtime") or "process")
            """
        )
    )
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--cwsandbox-timing", "realistic").assert_outcomes(passed=1)
    result = run(pytester, "--cwsandbox-timing", "slow")
    result.stderr.fnmatch_lines(["*invalid choice*slow*"])
    result = run(pytester, "--cwsandbox-runtime", "docker")
    result.stderr.fnmatch_lines(["*invalid choice*docker*"])


def test_the_target_mode_runs_against_another_endpoint_and_skips_emulator_only_helpers(pytester, monkeypatch):
    # A second emulator stands in for the cloud: the inner run starts none of its own.
    with Emulator() as cloud:
        monkeypatch.setenv("CWSANDBOX_API_KEY", cloud.user_token)
        monkeypatch.setenv("CLOUD_URL", cloud.base_url)
        placed = pytester.path / "sandbox-id"
        monkeypatch.setenv("SANDBOX_ID_FILE", str(placed))
        pytester.makepyfile(
            textwrap.dedent(
                """
                import os
                import pytest
                from cwsandbox import Sandbox

                def test_contract(cwsandbox_emulator, cwsandbox_tenant):
                    assert cwsandbox_emulator.base_url == os.environ["CLOUD_URL"]
                    assert os.environ["CWSANDBOX_BASE_URL"] == os.environ["CLOUD_URL"]
                    with Sandbox.run(placement_mode="cks", runner_ids=[cwsandbox_tenant.runner_id], tags=["contract"]) as sb:
                        assert sb.exec(["echo", "from the cloud"]).result().stdout == "from the cloud\\n"
                        open(os.environ["SANDBOX_ID_FILE"], "w").write(sb.sandbox_id)

                def test_faults(cwsandbox_tenant):
                    cwsandbox_tenant.faults.add(method="CreateSandbox", code="UNAVAILABLE")
                    raise AssertionError("not reached")

                def test_clock(cwsandbox_emulator):
                    cwsandbox_emulator.clock.freeze()

                def test_slurm(cwsandbox_tenant):
                    cwsandbox_tenant.slurm.jobs()

                def test_tenant_tokens(cwsandbox_tenant):
                    cwsandbox_tenant.admin_token

                @pytest.mark.cwsandbox_emulator_only
                def test_marked(cwsandbox_tenant):
                    raise AssertionError("not reached")
                """
            )
        )
        result = run(pytester, f"--cwsandbox-target={cloud.base_url}", "--cwsandbox-runner-id", cloud.runner_id)
        result.assert_outcomes(passed=1, skipped=5)
        for helper in ("faults", "clock", "slurm", "admin_token", "cwsandbox_emulator_only"):
            result.stdout.fnmatch_lines([f"*emulator-only helper '{helper}': --cwsandbox-target runs against a real service*"])
        # The contract test's sandbox ran in the stand-in cloud, placed through its SUNK.
        sandbox_id = placed.read_text()
        assert any(sandbox_id in job["name"] for job in cloud.slurm.jobs()), cloud.slurm.jobs()


def test_the_target_mode_needs_the_users_own_key(pytester, monkeypatch):
    monkeypatch.delenv("CWSANDBOX_API_KEY", raising=False)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run(pytester, "--cwsandbox-target=http://127.0.0.1:9")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--cwsandbox-target needs your own CWSANDBOX_API_KEY*"])


def test_the_session_fails_when_a_sandbox_process_outlives_the_emulator(pytester):
    pytester.makepyfile(
        textwrap.dedent(
            """
            import subprocess

            def test_leaves_a_process_in_the_sandbox_root(cwsandbox_emulator):
                hideout = cwsandbox_emulator.sandbox_root / "escaped"
                hideout.mkdir(parents=True)
                subprocess.Popen(["sleep", "600"], cwd=hideout, start_new_session=True)
            """
        )
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*OrphanError: processes outlived the emulator*", "*sleep 600*"])


def test_parallel_workers_with_xdist(pytester):
    pytester.makepyfile(
        textwrap.dedent(
            """
            import pytest
            from cwsandbox import Sandbox

            @pytest.mark.parametrize("n", range(4))
            def test_sandbox(cwsandbox_tenant, n):
                with Sandbox.run(placement_mode="cks", runner_ids=[cwsandbox_tenant.runner_id]) as sb:
                    assert sb.exec(["echo", str(n)]).result().stdout == f"{n}\\n"
                assert [s.sandbox_id for s in Sandbox.list().result()] in ([], [sb.sandbox_id])
            """
        )
    )
    run(pytester, "-n", "2").assert_outcomes(passed=4)


def test_a_domain_fault_shows_where_a_user_looks(cwsandbox_emulator, monkeypatch):
    from cwsandbox import Sandbox
    from cwsandbox.exceptions import CWSandboxError

    tenant = cwsandbox_emulator.create_tenant()
    try:
        for name, value in tenant.env().items():
            monkeypatch.setenv(name, value)
        tenant.faults.add(method="CreateSandbox", domain={"image_pull": "registry.example/broken*"})
        with pytest.raises(CWSandboxError):
            with Sandbox.run(
                placement_mode="cks", runner_ids=[tenant.runner_id], container_image="registry.example/broken:1"
            ) as sb:
                # Instant timing: no image pull back-off, the sandbox fails at once.
                sb.wait(timeout=60)
        # As the kubelet reports it: reasons Failed and BackOff, the waiting reason in the message.
        events = tenant.events()
        messages = {event.get("message", "") for event in events if event.get("reason") == "Failed"}
        assert {"Error: ErrImagePull", "Error: ImagePullBackOff"} <= messages, events
        assert "BackOff" in {event.get("reason") for event in events}
    finally:
        tenant.delete()
