//! The dashboard's first load and one live update, with `BENCH_SANDBOXES` sandboxes (default
//! 1,000) in the world: an in-process emulator on the `ready` scenario with the testkit's fake
//! runtime (no processes: this measures the dashboard, not sandbox start-up), sandboxes made with
//! CreateSandbox (the first fit the Nodes and run; the rest wait in Slurm's queue, PENDING).
//!
//! - **First load**: each request a browser's first visit makes, on a fresh connection: the page,
//!   its script and stylesheet, `whoami`, then the landing view (cluster); and the two views whose
//!   size grows with the world (sandboxes, Slurm). Bytes are uncompressed bodies.
//! - **Live update**: with the change stream open, CreateSandbox one more → the stream's `world`
//!   event → the sandboxes view fetched again and holding the new row.
//!
//! `BENCH_ROUNDS` rounds of each (default 20); prints median, min and max. With `BENCH_BROWSER=1`,
//! then the same in Debian's Chromium (`tests/browser/bench.mjs`, playwright-core): each view
//! loaded in a new browser context until it is drawn, and a new sandbox until its row shows. A
//! measurement, not a test: nothing here fails on a figure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_testkit::in_process::{FakeRuntime, client_spec, create_request, sandboxes, start_with};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// GET `path` on a new connection: (status, body bytes, time to the last byte).
async fn get(address: &str, path: &str, token: Option<&str>) -> Result<(u16, Bytes, Duration), Failure> {
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let mut request = http::Request::get(path).header(http::header::HOST, address);
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = sender.send_request(request.body(Empty::<Bytes>::new())?).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body, started.elapsed()))
}

fn summary(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "{label:<44} median {:>7.2} ms   min {:>7.2}   max {:>7.2}",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1])
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Failure> {
    let count: usize = std::env::var("BENCH_SANDBOXES").ok().and_then(|value| value.parse().ok()).unwrap_or(1000);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(20).max(1);
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let address = info.base_url.trim_start_matches("http://").to_owned();
    let token = info.admin_token.clone();
    let mut client = sandboxes(&emulator, &token).await;
    let made = Instant::now();
    for index in 0..count {
        client.create_sandbox(create_request(client_spec(&info.runner_id), &format!("bench-{index}"))).await?;
    }
    println!("{count} sandboxes made in {:.1} s; {rounds} rounds each", made.elapsed().as_secs_f64());

    // First load.
    let first_load = [
        ("page /ui/", "/ui/", false),
        ("script app.js", "/ui/assets/app.js", false),
        ("stylesheet app.css", "/ui/assets/app.css", false),
        ("whoami", "/ui/api/whoami", true),
        ("view cluster (landing)", "/ui/api/view/cluster", true),
    ];
    let mut total_bytes = 0;
    let mut totals = Vec::with_capacity(rounds);
    let mut each: Vec<Vec<Duration>> = vec![Vec::new(); first_load.len()];
    let mut sizes = vec![0usize; first_load.len()];
    for _ in 0..rounds {
        let started = Instant::now();
        for (index, (_, path, authenticated)) in first_load.iter().enumerate() {
            let (status, body, took) = get(&address, path, authenticated.then_some(token.as_str())).await?;
            assert_eq!(status, 200, "{path}");
            sizes[index] = body.len();
            each[index].push(took);
        }
        totals.push(started.elapsed());
    }
    for (index, (label, _, _)) in first_load.iter().enumerate() {
        summary(&format!("first load: {label} ({} B)", sizes[index]), &mut each[index]);
        total_bytes += sizes[index];
    }
    summary(&format!("first load, all five in turn ({total_bytes} B)"), &mut totals);
    for (label, path) in [("view sandboxes", "/ui/api/view/sandboxes"), ("view slurm", "/ui/api/view/slurm")] {
        let mut samples = Vec::with_capacity(rounds);
        let mut size = 0;
        for _ in 0..rounds {
            let (status, body, took) = get(&address, path, Some(&token)).await?;
            assert_eq!(status, 200, "{path}");
            size = body.len();
            samples.push(took);
        }
        summary(&format!("{label} ({size} B)"), &mut samples);
    }

    // Live update.
    let stream = tokio::net::TcpStream::connect(&address).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = http::Request::get("/ui/api/changes")
        .header(http::header::HOST, &address)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())?;
    let mut events = sender.send_request(request).await?.into_body();
    let mut pending = String::new();
    // Reads the stream up to the next event of `kind`.
    async fn next_event(events: &mut hyper::body::Incoming, pending: &mut String, kind: &str) -> Result<(), Failure> {
        loop {
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                if block.contains(&format!("event: {kind}\n")) {
                    return Ok(());
                }
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), events.frame())
                .await?
                .ok_or("the change stream ended")??;
            if let Some(data) = frame.data_ref() {
                pending.push_str(&String::from_utf8_lossy(data));
            }
        }
    }
    next_event(&mut events, &mut pending, "ready").await?;
    let mut to_event = Vec::with_capacity(rounds);
    let mut to_view = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Let the world settle, and drain what the stream said meanwhile.
        tokio::time::sleep(Duration::from_millis(250)).await;
        pending.clear();
        while let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_millis(1), events.frame()).await {}
        let started = Instant::now();
        let created =
            client.create_sandbox(create_request(client_spec(&info.runner_id), &format!("live-{round}"))).await?;
        let id = created.into_inner().sandbox_id;
        next_event(&mut events, &mut pending, "world").await?;
        to_event.push(started.elapsed());
        let (status, body, _) = get(&address, "/ui/api/view/sandboxes", Some(&token)).await?;
        assert_eq!(status, 200);
        assert!(String::from_utf8_lossy(&body).contains(&format!("data-sandbox=\"{id}\"")), "the new row is there");
        to_view.push(started.elapsed());
    }
    summary("live: CreateSandbox → world event", &mut to_event);
    summary("live: CreateSandbox → sandboxes view refetched", &mut to_view);
    drop(events);

    if std::env::var_os("BENCH_BROWSER").is_some() {
        // The same in Chromium (crates/emulator/tests/browser/bench.mjs; `npm ci` there first).
        let status = std::process::Command::new("node")
            .arg("bench.mjs")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser"))
            .env("BASE_URL", &info.base_url)
            .env("ADMIN_TOKEN", &token)
            .env("RUNNER_ID", &info.runner_id)
            .env("ROUNDS", rounds.min(10).to_string())
            .status()?;
        if !status.success() {
            return Err(format!("the browser measurement failed: {status}").into());
        }
    }
    Ok(())
}
