//! The Rust client's sandbox life cycle, timed: create (waiting for RUNNING) → exec `hostname` →
//! delete, against the emulator named by `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` and
//! `CWSANDBOX_RUNNER_ID` (`benches/python-lifecycle` starts one with `--timing instant` and runs
//! this next to the Python client). `BENCH_ROUNDS` life cycles (default 50) after one warm-up;
//! prints the median, min and max. A measurement, not a test: nothing here fails on a figure.

use std::time::{Duration, Instant};

use cwsandbox_client::Client;

async fn once(client: &Client, runner: &str) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let sandbox = client.sandbox().cks().runner_ids([runner.to_owned()]).run().await?;
    let result = sandbox.exec_check(&["hostname"]).await?;
    sandbox.delete().await?;
    let elapsed = started.elapsed();
    // Plain isolation shares the host's hostname: any name will do.
    if result.stdout_text().trim().is_empty() {
        return Err(format!("unexpected hostname {:?}", result.stdout_text()).into());
    }
    Ok(elapsed)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("CWSANDBOX_BASE_URL").is_none() {
        eprintln!(
            "lifecycle: set CWSANDBOX_BASE_URL, CWSANDBOX_API_KEY and CWSANDBOX_RUNNER_ID (benches/python-lifecycle does)"
        );
        return Ok(());
    }
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(50).max(1);
    let client = Client::from_env()?;
    once(&client, &runner).await?;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        samples.push(once(&client, &runner).await?);
    }
    samples.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "{{\"median_ms\": {:.2}, \"min_ms\": {:.2}, \"max_ms\": {:.2}, \"rounds\": {rounds}}}",
        ms(samples[rounds / 2]),
        ms(samples[0]),
        ms(samples[rounds - 1])
    );
    Ok(())
}
