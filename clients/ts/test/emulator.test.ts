// The generated TypeScript client (protobuf-es v2 messages, @connectrpc/connect v2 clients) against
// a running emulator, over Connect with JSON (HTTP/1.1) and Connect with binary protobuf (HTTP/2,
// h2c): the runner policy flow of step 2 of the SUNK guide (read, update with the etag, a stale
// etag refused), runner discovery, and a sandbox's life (create, RUNNING, exec `hostname`, delete).
//
// Needs CWSANDBOX_BASE_URL, CWSANDBOX_API_KEY (a cluster_admin token, as `serve` generates) and CWSANDBOX_RUNNER_ID, as
// `cwsandbox-emulator serve` prints them and `cwsandbox-emulator exec` sets them. Run with
// `node --test dist/test/emulator.test.js` after `tsc -p .`.

import assert from "node:assert/strict";
import { describe, test, after } from "node:test";

import { create } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

import { DiscoveryService } from "../gen/coreweave/sandbox/v1/discovery_pb.js";
import { RunnerManagementService } from "../gen/coreweave/sandbox/v1/runner_management_pb.js";
import { SandboxMode, SandboxService, State } from "../gen/coreweave/sandbox/v1/sandbox_pb.js";
import { EmulatorService } from "../gen/coreweave/sandbox/emulator/v1/emulator_pb.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (start the emulator and source what it prints)`);
  return value;
}

const baseUrl = env("CWSANDBOX_BASE_URL");
const token = env("CWSANDBOX_API_KEY");
const runnerId = env("CWSANDBOX_RUNNER_ID");

const bearer: Interceptor = (next) => async (req) => {
  req.header.set("Authorization", `Bearer ${token}`);
  return next(req);
};

const transports: { name: string; transport: Transport }[] = [
  {
    name: "Connect JSON over HTTP/1.1",
    transport: createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false, interceptors: [bearer] }),
  },
  {
    name: "Connect binary over HTTP/2",
    transport: createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, interceptors: [bearer] }),
  },
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const { name, transport } of transports) {
  describe(name, () => {
    const runners = createClient(RunnerManagementService, transport);
    const discovery = createClient(DiscoveryService, transport);
    const sandboxes = createClient(SandboxService, transport);
    const emulator = createClient(EmulatorService, transport);

    let etagBefore = "";
    let staleUpdate: Parameters<typeof runners.updateManagedRunner>[0] | undefined;
    let sandboxId = "";

    test("GetManagedRunner returns the policy and its etag", async () => {
      const runner = await runners.getManagedRunner({ runnerId });
      assert.equal(runner.identity?.runnerId, runnerId);
      assert.ok(runner.policy, "a configured runner has a policy");
      assert.ok(runner.etag, "the policy comes with an etag");
      etagBefore = runner.etag;
    });

    test("UpdateManagedRunner with the etag sets the scheduler name and gives a new etag", async () => {
      // Step 2 of the guide: read, set base.spec.schedulerName, send identity, policy and etag
      // back with update_mask "policy". The display name makes the policy change on every run.
      const runner = await runners.getManagedRunner({ runnerId });
      const policy = runner.policy!;
      const base = { ...(policy.base ?? {}) };
      base.spec = { ...((base.spec as Record<string, unknown> | undefined) ?? {}), schedulerName: "slurm-scheduler" } as never;
      policy.base = base;
      policy.displayName = `polyglot ${name} ${Date.now()}`;
      const request = {
        runnerId: runner.identity!.runnerId,
        managedRunner: { identity: runner.identity, policy, etag: runner.etag },
        updateMask: create(FieldMaskSchema, { paths: ["policy"] }),
      };
      const updated = await runners.updateManagedRunner(request);
      assert.equal((updated.policy?.base?.spec as Record<string, unknown>).schedulerName, "slurm-scheduler");
      assert.equal(updated.policy?.displayName, policy.displayName);
      assert.ok(updated.etag && updated.etag !== runner.etag, `a policy change gives a new etag (was ${runner.etag}, now ${updated.etag})`);
      assert.equal(runner.etag, etagBefore, "nothing else changed the policy in between");
      staleUpdate = request;
    });

    test("UpdateManagedRunner with the stale etag fails with failed_precondition", async () => {
      assert.ok(staleUpdate, "needs the previous update");
      await assert.rejects(runners.updateManagedRunner(staleUpdate), (error: unknown) => {
        const connect = ConnectError.from(error);
        assert.equal(connect.code, Code.FailedPrecondition, `${connect.code}: ${connect.rawMessage}`);
        assert.match(connect.rawMessage, /etag/);
        return true;
      });
    });

    test("ListAvailableRunners lists the runner, healthy", async () => {
      const response = await discovery.listAvailableRunners({});
      const runner = response.runners.find((r) => r.runnerId === runnerId);
      assert.ok(runner, `runner ${runnerId} in ${response.runners.map((r) => r.runnerId).join(", ")}`);
      assert.equal(runner.healthy, true);
    });

    test("CreateSandbox, then GetSandbox until RUNNING", { timeout: 120_000 }, async () => {
      const sandbox = await sandboxes.createSandbox({
        sandbox: {
          spec: {
            containers: [
              {
                name: "main",
                image: "python:3.11",
                command: "/bin/sh",
                args: ["-c", 'trap "exit 0" TERM INT; sleep infinity & wait'],
              },
            ],
            runnerIds: [runnerId],
            mode: SandboxMode.CKS,
          },
        },
        requestId: `polyglot-ts-${name}-${Date.now()}`,
      });
      assert.ok(sandbox.sandboxId, "CreateSandbox returns the sandbox id");
      sandboxId = sandbox.sandboxId;
      let state = sandbox.status?.state ?? State.UNSPECIFIED;
      const deadline = Date.now() + 100_000;
      while (state !== State.RUNNING) {
        assert.ok(
          [State.CREATING, State.PENDING, State.PREPARING].includes(state),
          `sandbox ${sandboxId} left the starting states for ${State[state]}`,
        );
        assert.ok(Date.now() < deadline, `sandbox ${sandboxId} still ${State[state]}`);
        await sleep(200);
        state = (await sandboxes.getSandbox({ sandboxId })).status?.state ?? State.UNSPECIFIED;
      }
    });

    test("Exec hostname prints the sandbox's Pod name", { timeout: 60_000 }, async () => {
      assert.ok(sandboxId, "needs the sandbox");
      const pods = await emulator.listPods({});
      const pod = pods.pods.find((p) => p.origin?.sandboxId === sandboxId);
      assert.ok(pod?.metadata?.name, `a Pod for sandbox ${sandboxId}`);
      const result = await sandboxes.exec({ sandboxId, command: ["hostname"] });
      assert.equal(result.exitCode, 0, new TextDecoder().decode(result.stderr));
      assert.equal(new TextDecoder().decode(result.stdout).trim(), pod.metadata.name);
    });

    test("DeleteSandbox stops it", async () => {
      assert.ok(sandboxId, "needs the sandbox");
      await sandboxes.deleteSandbox({ sandboxId, gracePeriodSeconds: 1 });
      const state = (await sandboxes.getSandbox({ sandboxId })).status?.state;
      assert.ok(
        state === State.TERMINATING || state === State.COMPLETED,
        `after DeleteSandbox: ${state === undefined ? "no state" : State[state]}`,
      );
      sandboxId = "";
    });

    after(async () => {
      // A failed step leaves no sandbox behind.
      if (sandboxId) await sandboxes.deleteSandbox({ sandboxId, allowMissing: true }).catch(() => {});
    });
  });
}
