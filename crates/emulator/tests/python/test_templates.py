"""Sandbox templates and Compose files, as the published client uses them: a template stored
through the API (the client has no template methods, so Connect JSON as an admin), then
`Sandbox.run_from_template`; a Compose file through `Sandbox.run_from_file`, each service a
container of the sandbox. What runs inside is checked with exec.
"""

from __future__ import annotations

import pytest

from conftest import KEEP_ALIVE, NAMESPACES, RUNNER, WAIT, connect, processes_with, sandbox_env
from cwsandbox import Sandbox
from cwsandbox.exceptions import CWSandboxError

TEMPLATES = "coreweave.sandbox.v1.SandboxTemplateService"


def create_template(mark: str, role: str) -> dict:
    return connect(
        TEMPLATES,
        "CreateSandboxTemplate",
        {
            "sandboxTemplate": {
                "displayName": f"worker {role}",
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "python:3.11",
                            "command": "/bin/sh",
                            "args": ["-c", KEEP_ALIVE],
                            "environmentVariables": sandbox_env(mark, ROLE=role),
                            "workingDir": "/srv/worker",
                        }
                    ],
                    "tags": ["from-template"],
                },
            }
        },
    )


def test_run_from_template_runs_the_templates_container(mark):
    template = create_template(mark, "templated")
    assert template["revision"] == "1" and not template.get("deleted", False)
    sb = Sandbox.run_from_template(template["sandboxTemplateId"], placement_mode="cks", runner_ids=[RUNNER])
    try:
        sb.wait(timeout=WAIT)
        inside = sb.exec(["sh", "-c", "echo $ROLE:$(pwd)"]).result()
        assert inside.stdout == "templated:/srv/worker\n"
        made = connect("coreweave.sandbox.v1.SandboxService", "GetSandbox", {"sandboxId": sb.sandbox_id})
        assert made["sourceTemplateId"] == template["sandboxTemplateId"]
        assert made["sourceTemplateRevision"] == "1"
    finally:
        sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def test_run_from_a_deleted_template_is_refused(mark):
    template = create_template(mark, "gone")
    connect(TEMPLATES, "DeleteSandboxTemplate", {"sandboxTemplateId": template["sandboxTemplateId"]})
    with pytest.raises(CWSandboxError) as refused:
        Sandbox.run_from_template(template["sandboxTemplateId"], placement_mode="cks", runner_ids=[RUNNER])
    assert "not found" in str(refused.value)


def compose(mark: str) -> bytes:
    env = "".join(f"      {key}: {value}\n" for key, value in sandbox_env(mark).items())
    return (
        "services:\n"
        "  app:\n"
        "    image: python:3.11\n"
        "    command: ['sh', '-c', 'exec sleep 1000']\n"
        "    environment:\n"
        "      ROLE: app\n"
        f"{env}"
        "  sidecar:\n"
        "    image: busybox:1.36\n"
        "    entrypoint: sh -c\n"
        "    command: \"'exec sleep 1000'\"\n"
        "    working_dir: /srv/sidecar\n"
        "    environment:\n"
        "      ROLE: sidecar\n"
        f"{env}"
    ).encode()


@pytest.mark.skipif(not NAMESPACES, reason="plain processes run one container only")
def test_run_from_file_runs_every_service_as_a_container(mark):
    sb = Sandbox.run_from_file(compose(mark), primary_service="app", placement_mode="cks", runner_ids=[RUNNER])
    try:
        sb.wait(timeout=WAIT)
        assert sb.exec(["sh", "-c", "echo $ROLE"]).result().stdout == "app\n"
        in_sidecar = sb.exec(["sh", "-c", "echo $ROLE:$(pwd)"], container="sidecar").result()
        assert in_sidecar.stdout == "sidecar:/srv/sidecar\n"
    finally:
        sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def ordered_compose(mark: str) -> bytes:
    env = "".join(f"      {key}: {value}\n" for key, value in sandbox_env(mark).items())
    return (
        "name: ordered\n"
        "services:\n"
        "  main:\n"
        "    image: python:3.11\n"
        "    command: ['sh', '-c', 'echo main >> /tmp/seen-by-main; exec sleep 1000']\n"
        "    depends_on:\n"
        "      api: {condition: service_healthy}\n"
        f"    environment:\n{env}"
        "  api:\n"
        "    image: python:3.11\n"
        "    command: ['python3', '-m', 'http.server', '8080', '--bind', '127.0.0.1']\n"
        "    healthcheck:\n"
        "      test: ['CMD', 'python3', '-c', \"import urllib.request; urllib.request.urlopen('http://api:8080/')\"]\n"
        "      interval: 1s\n"
        "      retries: 30\n"
        f"    environment:\n{env}"
    ).encode()


@pytest.mark.skipif(not NAMESPACES, reason="plain processes run one container only")
def test_depends_on_starts_the_services_in_order_on_the_hosts_programs(mark):
    # The main service waits until the api answers on its name (the Pod's hosts file).
    sb = Sandbox.run_from_file(ordered_compose(mark), primary_service="main", placement_mode="cks", runner_ids=[RUNNER])
    try:
        sb.wait(timeout=WAIT)
        fetched = sb.exec(["python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://api:8080/').status)"])
        assert fetched.result(timeout=WAIT).stdout == "200\n"
        hosts = sb.exec(["getent", "hosts", "api"]).result()
        assert hosts.stdout.split()[0] == "127.0.0.1", hosts
    finally:
        sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def test_a_compose_build_is_refused_by_name():
    with pytest.raises(CWSandboxError) as refused:
        Sandbox.run_from_file(
            b"services:\n  app:\n    build: .\n", primary_service="app", placement_mode="cks", runner_ids=[RUNNER]
        )
    assert "contents.services.app.build" in str(refused.value)
