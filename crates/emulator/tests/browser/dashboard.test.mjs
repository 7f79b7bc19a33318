// The dashboard in a real browser: Debian's Chromium driven by playwright-core, against an
// emulator started by crates/emulator/tests/dashboard.rs on the `fresh` scenario. Each step is
// what a platform engineer rehearsing the SUNK setup does; every wait is bounded.
//
// Environment: BASE_URL, ADMIN_TOKEN, USER_TOKEN, RUNNER_ID, PYTHON (a venv with the published
// cwsandbox client), SCREENSHOT_DIR, CHROMIUM (default /usr/bin/chromium).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

const run = promisify(execFile);
const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const BASE_URL = env("BASE_URL");
const ADMIN_TOKEN = env("ADMIN_TOKEN");
const USER_TOKEN = env("USER_TOKEN");
const RUNNER_ID = env("RUNNER_ID");
const PYTHON = env("PYTHON");
const SCREENSHOT_DIR = env("SCREENSHOT_DIR");
const WAIT = 20_000;

mkdirSync(SCREENSHOT_DIR, { recursive: true });

/** A Connect JSON call of the emulator's API, as curl would make it. */
async function api(path, body, token = ADMIN_TOKEN) {
  const response = await fetch(BASE_URL + path, {
    method: "POST",
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.equal(response.status, 200, `${path}: ${text}`);
  return JSON.parse(text);
}

const applyValues = (yaml) => api("/coreweave.sandbox.emulator.v1.EmulatorService/ApplyValues", { yaml });

/** Runs Python with the published client as the default organization's user. */
async function python(code) {
  const { stdout } = await run(PYTHON, ["-c", code], {
    timeout: 60_000,
    env: { ...process.env, CWSANDBOX_BASE_URL: BASE_URL, CWSANDBOX_API_KEY: USER_TOKEN, RUNNER_ID },
  });
  return stdout;
}

const createSandbox = (command) =>
  python(`
import os, sys
from cwsandbox import Sandbox
sb = Sandbox.run("sh", "-c", ${JSON.stringify(command)}, placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]])
print(sb.sandbox_id, flush=True)
try:
    sb.wait(timeout=30)
except Exception as error:
    print("failed:", error, file=sys.stderr)
`).then((out) => out.trim().split("\n")[0]);

const shot = (page, name) => page.screenshot({ path: join(SCREENSHOT_DIR, name), fullPage: true });

async function signIn(page, token) {
  await page.goto(BASE_URL + "/ui/");
  // A token kept from an earlier sign-in in this tab signs in by itself: sign out first.
  await page.locator("#login:not([hidden]), #logout:not([hidden])").first().waitFor();
  if (await page.locator("#logout").isVisible()) await page.locator("#logout").click();
  await page.locator("#login input[name=token]").fill(token);
  await page.locator("#login button[type=submit]").click();
}

async function openView(page, label) {
  await page.locator("#nav a", { hasText: label }).click();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const steps = [];
const step = async (name, body) => {
  const started = Date.now();
  await body();
  steps.push(`${name} (${Date.now() - started} ms)`);
  console.log(`ok - ${name} (${Date.now() - started} ms)`);
};

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  context.setDefaultTimeout(WAIT);
  const page = await context.newPage();
  const requestedUrls = [];
  page.on("request", (request) => requestedUrls.push(request.url()));

  await step("a wrong token sees nothing", async () => {
    await signIn(page, "not-a-token");
    await page.locator("#login-error", { hasText: "does not accept" }).waitFor();
    assert.equal(await page.locator("#nav").isHidden(), true);
    assert.equal((await page.locator("#view").innerHTML()).trim(), "");
    const refused = await fetch(BASE_URL + "/ui/api/view/cluster", { headers: { Authorization: "Bearer nope" } });
    assert.equal(refused.status, 401);
    assert.doesNotMatch(await refused.text(), /node-cpu/);
  });

  await step("the operator sees the fresh cluster with slurmd filling each Node", async () => {
    await signIn(page, ADMIN_TOKEN);
    await page.locator("#live.on").waitFor();
    await page.locator("article.node").first().waitFor();
    const shares = await page.$$eval("article.node", (nodes) =>
      nodes
        .filter((node) => node.querySelector(".badge")?.textContent.includes("slurm-"))
        .map((node) => {
          const bar = node.querySelector(".bar");
          const slurmd = Number(bar.querySelector(".seg.slurmd")?.dataset.amount || 0);
          const all = [...bar.querySelectorAll(".seg")].reduce((sum, seg) => sum + Number(seg.dataset.amount), 0);
          return slurmd / all;
        }),
    );
    assert.equal(shares.length, 4, "four Slurm Nodes");
    for (const share of shares) assert.ok(share > 0.9, `slurmd holds ${share} of a Node's CPU`);
    const stored = await page.evaluate(() => sessionStorage.getItem("cwsandbox.dashboard.token"));
    assert.equal(stored, ADMIN_TOKEN, "the token is kept in session storage");
    await shot(page, "cluster-fresh.png");
  });

  await step("the readiness checklist is red on the guide's items", async () => {
    await openView(page, "SUNK readiness");
    await page.locator(".check").first().waitFor();
    const verdicts = Object.fromEntries(
      await page.$$eval(".check", (checks) => checks.map((check) => [check.dataset.check, check.dataset.ok])),
    );
    assert.deepEqual(verdicts, { scheduler: "true", policy: "false", grace: "false", scope: "false", room: "false" });
    assert.match(await page.locator('[data-check=grace] .fix').innerText(), /KillWait/);
    await shot(page, "readiness-fresh.png");
  });

  await step("a fix applied elsewhere turns its item green without a reload", async () => {
    await page.evaluate(() => (window.notReloaded = true));
    await applyValues("slurmConfig:\n  KillWait: 60\nscheduler:\n  scope:\n    type: cluster\n");
    await page.locator('[data-check=grace][data-ok=true]').waitFor();
    await page.locator('[data-check=scope][data-ok=true]').waitFor();
    const runner = await api("/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner", { runnerId: RUNNER_ID });
    await api("/coreweave.sandbox.v1.RunnerManagementService/UpdateManagedRunner", {
      runnerId: RUNNER_ID,
      managedRunner: { policy: { base: { spec: { schedulerName: "slurm-scheduler" } } }, etag: runner.etag },
      updateMask: "policy",
    });
    await page.locator('[data-check=policy][data-ok=true]').waitFor();
    assert.equal(await page.evaluate(() => window.notReloaded), true, "the page was not reloaded");
    assert.equal(await page.locator('[data-check=room][data-ok=false]').count(), 1);
  });

  let refusedId;
  await step("a sandbox Slurm places beside slurmd is refused OutOfcpu on its Node", async () => {
    refusedId = await createSandbox("sleep 600");
    await openView(page, "Cluster");
    const refusal = page.locator(`.refusal[data-reason=OutOfcpu]`, { hasText: refusedId });
    await refusal.waitFor();
    const node = await refusal.evaluate((element) => element.closest("article.node").dataset.node);
    assert.match(node, /^node-cpu-/);
    await shot(page, "cluster-outofcpu.png");
  });

  let sandboxId;
  await step("with slurmd's requests lowered a new sandbox appears and turns Running", async () => {
    await applyValues(
      'nodeSets:\n- name: cpu\n  replicas: 4\n  cpu: "16"\n  memory: 64Gi\n  slurmd:\n    requests:\n      cpu: "1"\n      memory: 4Gi\n',
    );
    await openView(page, "SUNK readiness");
    await page.locator('[data-check=room][data-ok=true]').waitFor();
    assert.equal(await page.locator(".check.red").count(), 0);
    await shot(page, "readiness-ready.png");
    await openView(page, "Sandboxes");
    await page.locator("table.sandboxes").waitFor();
    const created = createSandbox('i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo "line-$i"; sleep 0.2; done');
    sandboxId = await created;
    await page.locator(`tr[data-sandbox="${sandboxId}"][data-state=RUNNING]`).waitFor();
    assert.equal(await page.evaluate(() => window.notReloaded), true, "the list updated without a reload");
  });

  await step("the sandbox page follows its logs, runs a command and draws its timeline", async () => {
    await page.locator(`a[href="/ui/sandboxes/${sandboxId}"]`).click();
    await page.locator("#sandbox-state[data-state=RUNNING]").waitFor();
    await page.locator("#logs", { hasText: "line-3" }).waitFor();
    const before = (await page.locator("#logs").innerText()).split("\n").filter(Boolean).length;
    await page.waitForFunction(
      (count) => document.querySelector("#logs").innerText.split("\n").filter(Boolean).length > count + 3,
      before,
    );
    await page.locator("#exec input[name=command]").fill("echo from-the-dashboard; hostname");
    await page.locator("#exec button").click();
    await page.locator("#exec-output .exit[data-exit-code='0']").waitFor();
    assert.match(await page.locator("#exec-output").innerText(), /from-the-dashboard/);
    const timeline = await page.$$eval("ol.timeline strong", (items) => items.map((item) => item.textContent));
    for (const wanted of ["Created", "Job submitted", "Allocated", "Running"]) {
      assert.ok(timeline.includes(wanted), `timeline has ${wanted}: ${timeline}`);
    }
    assert.match(await page.locator("dl.facts").innerText(), /node-cpu-\d/);
    await shot(page, "sandbox-page.png");
  });

  await step("the Slurm view shows the placeholder jobs", async () => {
    await openView(page, "Slurm");
    await page.locator("#queue tbody tr[data-job]").first().waitFor();
    const rows = await page.$$eval("#accounting tbody tr[data-job]", (rows) => rows.length);
    assert.ok(rows >= 2, `accounting has both placeholders: ${rows}`);
    await page.locator("select[name=state]").selectOption("RUNNING");
    await page.locator("form[data-filter] button").click();
    await page.waitForURL(/state=RUNNING/);
    // The filtered view is in once its form shows the filter it was rendered with.
    await page.locator('form[data-filter] select[name=state] option[value=RUNNING][selected]').waitFor({
      state: "attached",
    });
    const states = await page.$$eval("#queue tbody tr[data-job]", (rows) => rows.map((row) => row.dataset.state));
    assert.ok(states.length >= 1 && states.every((state) => state === "R"), `only running jobs: ${states}`);
  });

  await step("deleting from the page ends the sandbox", async () => {
    await page.goto(`${BASE_URL}/ui/sandboxes/${sandboxId}`);
    await page.locator("#sandbox-state[data-state=RUNNING]").waitFor();
    await page.locator("#delete button").click();
    await page.locator("#delete button[data-armed='1']").waitFor();
    await page.locator("#delete button").click();
    await page.locator("#sandbox-state:not([data-state=RUNNING])").waitFor();
    const state = await page.locator("#sandbox-state").getAttribute("data-state");
    assert.ok(["TERMINATING", "TERMINATED", "COMPLETED"].includes(state), state);
  });

  await step("the request log shows the calls with their codes", async () => {
    await openView(page, "Requests");
    await page.locator('tr[data-method="SandboxService/CreateSandbox"]').first().waitFor();
    await page.locator('tr[data-method="SandboxService/DeleteSandbox"][data-code=OK]').first().waitFor();
    await page.locator('tr[data-method="RunnerManagementService/UpdateManagedRunner"][data-code=OK]').waitFor();
  });

  await step("a drained Slurm node shows its reason on its Node", async () => {
    await openView(page, "Cluster");
    await page.locator("article.node").first().waitFor();
    await api("/coreweave.sandbox.emulator.v1.EmulatorService/DrainNode", {
      nodeName: "slurm-cpu-3",
      reason: "rehearsal maintenance",
    });
    const drained = page.locator('article.node[data-node="node-cpu-3"] .drained', { hasText: "rehearsal maintenance" });
    await drained.waitFor();
  });

  await step("the runner's policy shows base as enforced, with its etag", async () => {
    await openView(page, "Runners");
    const runner = page.locator(`article.runner[data-runner="${RUNNER_ID}"]`);
    await runner.waitFor();
    const enforced = await runner.locator("pre.policy .enforced").allInnerTexts();
    assert.ok(enforced.some((line) => line.includes("schedulerName: slurm-scheduler")), `enforced lines: ${enforced}`);
    const current = await api("/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner", { runnerId: RUNNER_ID });
    assert.equal(await runner.locator("code.etag").innerText(), current.etag);
  });

  await step("the clock freezes and advances from its page", async () => {
    await openView(page, "Clock");
    await page.locator("#freeze button").click();
    await page.locator(".clock[data-frozen=true]").waitFor();
    const before = Date.parse((await page.locator("#clock-now").innerText()) + "Z");
    await page.locator("#advance input[name=seconds]").fill("90");
    await page.locator("#advance button").click();
    await page.waitForFunction(
      (start) => Date.parse(document.querySelector("#clock-now").textContent + "Z") - start >= 90_000,
      before,
    );
    await page.locator("#resume button").click();
    await page.locator(".clock[data-frozen=false]").waitFor();
  });

  await step("a fault's hits count up on the faults page", async () => {
    const { fault } = await api("/coreweave.sandbox.emulator.v1.EmulatorService/AddFault", {
      fault: { match: { method: "ListSandboxes" }, action: { code: "UNAVAILABLE" } },
    });
    await openView(page, "Faults");
    await page.locator(`tr[data-fault="${fault.id}"] [data-hits="0"]`).waitFor();
    const listed = await fetch(BASE_URL + "/coreweave.sandbox.v1.SandboxService/ListSandboxes", {
      method: "POST",
      headers: { Authorization: "Bearer " + USER_TOKEN, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.equal(listed.status, 503);
    await page.reload();
    await page.locator(`tr[data-fault="${fault.id}"] [data-hits="1"]`).waitFor();
    await openView(page, "Requests");
    await page
      .locator('tr[data-method="SandboxService/ListSandboxes"][data-code=UNAVAILABLE]', { hasText: fault.id })
      .waitFor();
    await api("/coreweave.sandbox.emulator.v1.EmulatorService/ClearFaults", {});
  });

  await step("the token never appears in a URL", async () => {
    for (const url of requestedUrls) assert.ok(!url.includes(ADMIN_TOKEN) && !url.includes(USER_TOKEN), url);
  });

  await step("another organization's user sees only its own part", async () => {
    const tenant = (await api("/coreweave.sandbox.emulator.v1.EmulatorService/CreateTenant", { organization: "acme" })).tenant;
    const other = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    other.setDefaultTimeout(WAIT);
    const otherPage = await other.newPage();
    await signIn(otherPage, tenant.userToken);
    await otherPage.locator("#who", { hasText: "acme" }).waitFor();
    await otherPage.locator(".refusal", { hasText: "lacks" }).waitFor();
    assert.equal(await otherPage.locator("article.node").count(), 0, "a user's token does not see the Nodes");
    await openView(otherPage, "Sandboxes");
    await otherPage.locator("table.sandboxes").waitFor();
    assert.equal(await otherPage.locator(`tr[data-sandbox]`).count(), 0, "no other organization's sandbox");
    const direct = await fetch(`${BASE_URL}/ui/api/view/sandboxes/${sandboxId}`, {
      headers: { Authorization: "Bearer " + tenant.userToken },
    });
    assert.equal(direct.status, 404);
    await openView(otherPage, "Requests");
    await otherPage.locator("table.requests").waitFor();
    const orgs = await otherPage.$$eval("table.requests tbody tr[data-method] td:nth-child(4)", (cells) =>
      cells.map((cell) => cell.textContent),
    );
    assert.ok(orgs.every((text) => text.includes("(acme)")), `only acme's calls: ${orgs}`);
    await signIn(otherPage, tenant.adminToken);
    await otherPage.locator("article.node").first().waitFor();
    assert.equal(await otherPage.locator(".refusal[data-reason]").count(), 0, "not default-org's refused Pod");
    await other.close();
  });
} finally {
  await browser.close();
}
console.log(`${steps.length} steps passed`);
