"""The generated Python client (protobuf messages and grpcio stubs) against a running emulator over
gRPC: the runner policy flow of step 2 of the SUNK guide (read, update with the etag, a stale etag
refused), runner discovery, and a sandbox's life (create, RUNNING, exec `hostname`, delete).

Needs CWSANDBOX_BASE_URL (http://host:port), CWSANDBOX_API_KEY (a cluster_admin token, as `serve` generates) and
CWSANDBOX_RUNNER_ID, as `cwsandbox-emulator serve` prints them and `cwsandbox-emulator exec` sets
them, and the generated code on the path: `PYTHONPATH=clients/python/gen python -m unittest -v
clients/python/tests/test_emulator.py`. The steps run in order (unittest sorts them by name) and
share one sandbox.
"""

import os
import time
import unittest
from urllib.parse import urlparse

import grpc
from google.protobuf import field_mask_pb2

from coreweave.sandbox.emulator.v1 import emulator_pb2, emulator_pb2_grpc
from coreweave.sandbox.v1 import (
    discovery_pb2,
    discovery_pb2_grpc,
    runner_management_pb2,
    runner_management_pb2_grpc,
    sandbox_pb2,
    sandbox_pb2_grpc,
)


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (start the emulator and source what it prints)")
    return value


BASE_URL = env("CWSANDBOX_BASE_URL")
TOKEN = env("CWSANDBOX_API_KEY")
RUNNER_ID = env("CWSANDBOX_RUNNER_ID")
METADATA = (("authorization", f"Bearer {TOKEN}"),)
STARTING = {sandbox_pb2.STATE_CREATING, sandbox_pb2.STATE_PENDING, sandbox_pb2.STATE_PREPARING}


class GeneratedClientAgainstEmulator(unittest.TestCase):
    channel: grpc.Channel
    sandbox_id = ""
    etag_before = ""
    stale_update: runner_management_pb2.UpdateManagedRunnerRequest | None = None

    @classmethod
    def setUpClass(cls) -> None:
        url = urlparse(BASE_URL)
        assert url.scheme == "http", f"the emulator serves plain h2c: {BASE_URL}"
        cls.channel = grpc.insecure_channel(url.netloc)
        cls.runners = runner_management_pb2_grpc.RunnerManagementServiceStub(cls.channel)
        cls.discovery = discovery_pb2_grpc.DiscoveryServiceStub(cls.channel)
        cls.sandboxes = sandbox_pb2_grpc.SandboxServiceStub(cls.channel)
        cls.emulator = emulator_pb2_grpc.EmulatorServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.sandbox_id:  # a failed step leaves no sandbox behind
            try:
                cls.sandboxes.DeleteSandbox(
                    sandbox_pb2.DeleteSandboxRequest(sandbox_id=cls.sandbox_id, allow_missing=True),
                    metadata=METADATA,
                    timeout=10,
                )
            except grpc.RpcError:
                pass
        cls.channel.close()

    def test_1_get_managed_runner(self) -> None:
        runner = self.runners.GetManagedRunner(
            runner_management_pb2.GetManagedRunnerRequest(runner_id=RUNNER_ID), metadata=METADATA, timeout=10
        )
        self.assertEqual(runner.identity.runner_id, RUNNER_ID)
        self.assertTrue(runner.HasField("policy"), "a configured runner has a policy")
        self.assertTrue(runner.etag, "the policy comes with an etag")
        type(self).etag_before = runner.etag

    def test_2_update_managed_runner_with_etag(self) -> None:
        # Step 2 of the guide: read, set base.spec.schedulerName, send identity, policy and etag
        # back with update_mask "policy". The display name makes the policy change on every run.
        runner = self.runners.GetManagedRunner(
            runner_management_pb2.GetManagedRunnerRequest(runner_id=RUNNER_ID), metadata=METADATA, timeout=10
        )
        policy = runner.policy
        policy.base.get_or_create_struct("spec")["schedulerName"] = "slurm-scheduler"
        policy.display_name = f"polyglot python gRPC {time.time_ns()}"
        request = runner_management_pb2.UpdateManagedRunnerRequest(
            runner_id=runner.identity.runner_id,
            managed_runner=runner_management_pb2.ManagedRunner(
                identity=runner.identity, policy=policy, etag=runner.etag
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["policy"]),
        )
        updated = self.runners.UpdateManagedRunner(request, metadata=METADATA, timeout=10)
        self.assertEqual(updated.policy.base["spec"]["schedulerName"], "slurm-scheduler")
        self.assertEqual(updated.policy.display_name, policy.display_name)
        self.assertTrue(updated.etag)
        self.assertNotEqual(updated.etag, runner.etag, "a policy change gives a new etag")
        self.assertEqual(runner.etag, self.etag_before, "nothing else changed the policy in between")
        type(self).stale_update = request

    def test_3_update_managed_runner_with_stale_etag_fails(self) -> None:
        self.assertIsNotNone(self.stale_update, "needs the previous update")
        with self.assertRaises(grpc.RpcError) as raised:
            self.runners.UpdateManagedRunner(self.stale_update, metadata=METADATA, timeout=10)
        error = raised.exception
        self.assertEqual(error.code(), grpc.StatusCode.FAILED_PRECONDITION, error.details())
        self.assertIn("etag", error.details())

    def test_4_list_available_runners(self) -> None:
        response = self.discovery.ListAvailableRunners(
            discovery_pb2.ListAvailableRunnersRequest(), metadata=METADATA, timeout=10
        )
        runners = {runner.runner_id: runner for runner in response.runners}
        self.assertIn(RUNNER_ID, runners)
        self.assertTrue(runners[RUNNER_ID].healthy)

    def test_5_create_sandbox_until_running(self) -> None:
        spec = sandbox_pb2.SandboxSpec(
            containers=[
                sandbox_pb2.Container(
                    name="main",
                    image="python:3.11",
                    command="/bin/sh",
                    args=["-c", 'trap "exit 0" TERM INT; sleep infinity & wait'],
                )
            ],
            runner_ids=[RUNNER_ID],
            mode=sandbox_pb2.SANDBOX_MODE_CKS,
        )
        sandbox = self.sandboxes.CreateSandbox(
            sandbox_pb2.CreateSandboxRequest(
                sandbox=sandbox_pb2.Sandbox(spec=spec), request_id=f"polyglot-python-{time.time_ns()}"
            ),
            metadata=METADATA,
            timeout=10,
        )
        self.assertTrue(sandbox.sandbox_id, "CreateSandbox returns the sandbox id")
        type(self).sandbox_id = sandbox.sandbox_id
        state = sandbox.status.state
        deadline = time.monotonic() + 100
        while state != sandbox_pb2.STATE_RUNNING:
            self.assertIn(state, STARTING, f"left the starting states for {sandbox_pb2.State.Name(state)}")
            self.assertLess(time.monotonic(), deadline, f"still {sandbox_pb2.State.Name(state)}")
            time.sleep(0.2)
            state = self.sandboxes.GetSandbox(
                sandbox_pb2.GetSandboxRequest(sandbox_id=self.sandbox_id), metadata=METADATA, timeout=10
            ).status.state

    def test_6_exec_hostname_prints_the_pod_name(self) -> None:
        self.assertTrue(self.sandbox_id, "needs the sandbox")
        pods = self.emulator.ListPods(emulator_pb2.ListPodsRequest(), metadata=METADATA, timeout=10).pods
        names = [pod.metadata.name for pod in pods if pod.origin.sandbox_id == self.sandbox_id]
        self.assertEqual(len(names), 1, f"one Pod for sandbox {self.sandbox_id}")
        result = self.sandboxes.Exec(
            sandbox_pb2.ExecRequest(sandbox_id=self.sandbox_id, command=["hostname"]), metadata=METADATA, timeout=30
        )
        self.assertEqual(result.exit_code, 0, result.stderr)
        self.assertEqual(result.stdout.decode().strip(), names[0])

    def test_7_delete_sandbox(self) -> None:
        self.assertTrue(self.sandbox_id, "needs the sandbox")
        self.sandboxes.DeleteSandbox(
            sandbox_pb2.DeleteSandboxRequest(sandbox_id=self.sandbox_id, grace_period_seconds=1),
            metadata=METADATA,
            timeout=10,
        )
        state = self.sandboxes.GetSandbox(
            sandbox_pb2.GetSandboxRequest(sandbox_id=self.sandbox_id), metadata=METADATA, timeout=10
        ).status.state
        self.assertIn(state, {sandbox_pb2.STATE_TERMINATING, sandbox_pb2.STATE_COMPLETED}, sandbox_pb2.State.Name(state))
        type(self).sandbox_id = ""


if __name__ == "__main__":
    unittest.main(verbosity=2)
