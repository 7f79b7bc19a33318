// The dashboard's first load and a live update as Chromium sees them, run by
// crates/emulator/benches/dashboard.rs (BENCH_BROWSER=1) against its emulator with its sandboxes.
// A measurement, not a test: prints medians; fails only if the page never shows what it waits for.
//
// Environment: BASE_URL, ADMIN_TOKEN, RUNNER_ID, ROUNDS,
// CHROMIUM (default /usr/bin/chromium).

import { chromium } from "playwright-core";

const { BASE_URL, ADMIN_TOKEN, RUNNER_ID } = process.env;
const ROUNDS = Number(process.env.ROUNDS || 10);

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const report = (label, values) =>
  console.log(
    `${label.padEnd(52)} median ${median(values).toFixed(1).padStart(7)} ms   min ${Math.min(...values).toFixed(1)}   max ${Math.max(...values).toFixed(1)}`,
  );

async function createSandbox() {
  const response = await fetch(BASE_URL + "/coreweave.sandbox.v1.SandboxService/CreateSandbox", {
    method: "POST",
    headers: { Authorization: "Bearer " + ADMIN_TOKEN, "Content-Type": "application/json" },
    body: JSON.stringify({
      sandbox: {
        spec: {
          containers: [{ name: "main", image: "python:3.11", command: "/bin/sh", args: ["-c", "sleep infinity"] }],
          runnerIds: [RUNNER_ID],
          mode: "SANDBOX_MODE_CKS",
        },
      },
    }),
  });
  if (response.status !== 200) throw new Error(`CreateSandbox: ${response.status} ${await response.text()}`);
  return (await response.json()).sandboxId;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  // The rows the list should draw: the sandboxes view as the server renders it now.
  const listed = await fetch(BASE_URL + "/ui/api/view/sandboxes", { headers: { Authorization: "Bearer " + ADMIN_TOKEN } });
  const SANDBOXES = ((await listed.text()).match(/<tr data-sandbox=/g) || []).length;
  let rows = 0;
  // Each load in a new context: an empty cache, as on a first visit; the token is in session
  // storage as after signing in. Returns (milliseconds, body bytes) until `ready` holds.
  async function firstLoad(path, ready) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    await context.addInitScript((token) => sessionStorage.setItem("cwsandbox.dashboard.token", token), ADMIN_TOKEN);
    const page = await context.newPage();
    let bytes = 0;
    page.on("response", async (response) => {
      if (response.url().includes("/ui/api/changes")) return;
      const body = await response.body().catch(() => null);
      if (body) bytes += body.length;
    });
    const started = performance.now();
    await page.goto(BASE_URL + path);
    await ready(page);
    const took = performance.now() - started;
    await page.waitForTimeout(100);
    await context.close();
    return [took, bytes];
  }
  for (const [path, label, ready] of [
    ["/ui/cluster", "until the Nodes are drawn", (page) => page.locator("article.node").first().waitFor({ timeout: 30_000 })],
    [
      "/ui/sandboxes",
      "until its list is drawn",
      async (page) => {
        await page.locator("table.sandboxes").waitFor({ timeout: 30_000 });
        rows = await page.locator("tr[data-sandbox]").count();
      },
    ],
  ]) {
    const times = [];
    let bytes = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const [took, size] = await firstLoad(path, ready);
      times.push(took);
      bytes = size;
    }
    report(`first load: ${path} ${label} (${bytes} B)`, times);
    if (path === "/ui/sandboxes") console.log(`rows drawn: ${rows} (the server listed ${SANDBOXES} just before)`);
  }

  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addInitScript((token) => sessionStorage.setItem("cwsandbox.dashboard.token", token), ADMIN_TOKEN);
  const page = await context.newPage();
  await page.goto(BASE_URL + "/ui/sandboxes");
  await page.locator("#live.on").waitFor({ timeout: 30_000 });
  const live = [];
  for (let round = 0; round < ROUNDS; round++) {
    await page.waitForTimeout(300);
    const started = performance.now();
    const id = await createSandbox();
    await page.locator(`tr[data-sandbox="${id}"]`).waitFor({ timeout: 30_000 });
    live.push(performance.now() - started);
  }
  report("live: CreateSandbox until its row is on the page", live);
} finally {
  await browser.close();
}
