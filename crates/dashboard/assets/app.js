// The dashboard's script: sign-in, navigation, fetching the server-rendered views, the live
// change stream, forms and the log follower. The views are HTML from the emulator; this file
// only moves them into the page. The token lives in sessionStorage and travels in the
// Authorization header, never in a URL.
"use strict";

const TOKEN_KEY = "cwsandbox.dashboard.token";
const DEFAULT_VIEW = "cluster";

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  changes: null, // AbortController of the change stream
  logs: null, // AbortController of the log follower
  loading: false,
  again: false,
  timer: null,
};

const $ = (selector) => document.querySelector(selector);

function authHeaders(extra) {
  return Object.assign({ Authorization: "Bearer " + state.token }, extra || {});
}

function currentView() {
  const path = location.pathname.replace(/^\/ui\/?/, "").replace(/\/+$/, "");
  return path || DEFAULT_VIEW;
}

function showLogin(message) {
  stopLive();
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#nav").hidden = true;
  $("#logout").hidden = true;
  $("#who").textContent = "";
  $("#view").innerHTML = "";
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#login input[name=token]").focus();
}

async function whoami(token) {
  const response = await fetch("/ui/api/whoami", { headers: { Authorization: "Bearer " + token } });
  if (!response.ok) return null;
  return response.json();
}

async function signIn(token) {
  const who = await whoami(token).catch(() => null);
  if (!who) {
    showLogin("The emulator does not accept this token.");
    return;
  }
  state.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#logout").hidden = false;
  $("#who").textContent = who.user + " (" + who.org + ")" + (who.operator ? " · operator" : "");
  document.body.dataset.org = who.org;
  // The change stream opens first, so no change between the view's reading and the stream's
  // start goes unseen; the view is fetched once the stream says it is open.
  await new Promise((resolve) => startLive(resolve));
  await loadView();
}

// Views ------------------------------------------------------------------------------------------

function markNavigation() {
  const view = currentView().split("/")[0];
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.view === view);
  }
}

// Swaps in a view, keeping the elements marked data-keep (the log being followed, the exec box
// with what is typed in it) when the new view has them too.
function swapView(html) {
  const main = $("#view");
  const kept = new Map();
  for (const element of main.querySelectorAll("[data-keep][id]")) kept.set(element.id, element);
  const focused = document.activeElement && main.contains(document.activeElement) ? document.activeElement : null;
  main.innerHTML = html;
  for (const fresh of main.querySelectorAll("[data-keep][id]")) {
    const old = kept.get(fresh.id);
    if (old) fresh.replaceWith(old);
  }
  if (focused && main.contains(focused)) focused.focus();
  main.dataset.view = currentView();
  main.dataset.loadedAt = String(Date.now());
  startLogs();
}

async function loadView() {
  if (!state.token) return;
  if (state.loading) {
    state.again = true;
    return;
  }
  state.loading = true;
  try {
    do {
      state.again = false;
      const url = "/ui/api/view/" + currentView() + location.search;
      const response = await fetch(url, { headers: authHeaders() });
      if (response.status === 401) {
        showLogin("The emulator no longer accepts this token.");
        return;
      }
      swapView(await response.text());
      markNavigation();
    } while (state.again);
  } catch (error) {
    $("#view").dataset.error = String(error);
  } finally {
    state.loading = false;
  }
}

function navigate(href) {
  history.pushState(null, "", href);
  stopLogs();
  $("#view").innerHTML = "";
  loadView();
}

// Live -------------------------------------------------------------------------------------------

function stopLive() {
  if (state.changes) state.changes.abort();
  state.changes = null;
  stopLogs();
  $("#live").className = "";
  $("#live").textContent = "";
}

function setLive(on) {
  $("#live").className = on ? "on" : "off";
  $("#live").textContent = on ? "live" : "reconnecting";
}

function onChange(kind) {
  const view = currentView();
  const wanted = view === "requests" ? kind === "requests" : kind === "world";
  if (wanted) loadView();
}

// Reads the server-sent events of /ui/api/changes with fetch (EventSource cannot send the
// Authorization header) and reconnects after a second when the stream ends. `opened` is called
// at the first `ready` event; a later one (a reconnect, which may have missed changes) fetches
// the view again.
async function startLive(opened) {
  stopLive();
  const controller = new AbortController();
  state.changes = controller;
  let first = true;
  const ready = () => {
    if (first) {
      first = false;
      if (opened) opened();
    } else {
      loadView();
    }
  };
  while (!controller.signal.aborted) {
    try {
      const response = await fetch("/ui/api/changes", { headers: authHeaders(), signal: controller.signal });
      if (response.status === 401) {
        showLogin("The emulator no longer accepts this token.");
        return;
      }
      setLive(true);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (\w+)$/m.exec(block);
          if (event && event[1] === "ready") ready();
          else if (event) onChange(event[1]);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    // A stream that never opened must not hold the first view back.
    if (first) ready();
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Logs -------------------------------------------------------------------------------------------

function stopLogs() {
  if (state.logs) state.logs.abort();
  state.logs = null;
}

async function startLogs() {
  const pre = document.querySelector("pre[data-logs]");
  if (!pre || pre.dataset.streaming === "1" || pre.dataset.ended === "1") return;
  stopLogs();
  const controller = new AbortController();
  state.logs = controller;
  pre.dataset.streaming = "1";
  pre.textContent = "";
  const follow = $("#follow") ? $("#follow").checked : true;
  try {
    const response = await fetch(pre.dataset.logs + "?follow=" + follow, {
      headers: authHeaders(),
      signal: controller.signal,
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(value);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    pre.dataset.ended = "1";
  } catch (error) {
    // Aborted: the page moved on, or follow was switched.
  } finally {
    pre.dataset.streaming = "";
  }
}

// Forms ------------------------------------------------------------------------------------------

async function submitAction(form) {
  const button = form.querySelector("[data-confirm]");
  if (button && button.dataset.armed !== "1") {
    button.dataset.armed = "1";
    button.dataset.label = button.textContent;
    button.textContent = button.dataset.confirm;
    setTimeout(() => {
      button.dataset.armed = "";
      button.textContent = button.dataset.label;
    }, 5000);
    return;
  }
  const fields = {};
  for (const [name, value] of new FormData(form)) fields[name] = String(value);
  const result =
    form.querySelector("[data-result]") ||
    (form.parentElement && form.parentElement.querySelector("[data-result]"));
  if (result) result.textContent = "…";
  const response = await fetch(form.dataset.action, {
    method: "POST",
    headers: authHeaders({ "Content-Type": "application/json" }),
    body: JSON.stringify(fields),
  });
  if (response.status === 401) {
    showLogin("The emulator no longer accepts this token.");
    return;
  }
  const html = await response.text();
  if (result) {
    result.innerHTML = html;
    result.dataset.status = String(response.status);
  }
  // What the action changed may not be a change of the world (the clock's state): read the view
  // again rather than wait for an event that may not come.
  if (response.ok && !form.closest("[data-keep]")) loadView();
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.id === "login") {
    event.preventDefault();
    signIn(form.elements.token.value.trim());
    return;
  }
  if (form.dataset.action) {
    event.preventDefault();
    submitAction(form);
    return;
  }
  if (form.hasAttribute("data-filter")) {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (String(value) !== "") query.set(name, String(value));
    const search = query.toString();
    navigate(location.pathname + (search ? "?" + search : ""));
  }
});

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[href]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui/") || url.pathname.startsWith("/ui/api/")) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

document.addEventListener("change", (event) => {
  if (event.target.id === "follow") {
    const pre = document.querySelector("pre[data-logs]");
    stopLogs();
    if (pre) {
      pre.dataset.streaming = "";
      pre.dataset.ended = "";
    }
    startLogs();
  }
});

window.addEventListener("popstate", () => {
  stopLogs();
  loadView();
});

document.addEventListener("DOMContentLoaded", () => {
  $("#logout").addEventListener("click", () => showLogin(""));
  if (state.token) signIn(state.token);
  else showLogin("");
});
