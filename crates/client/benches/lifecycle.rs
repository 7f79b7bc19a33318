//! The Rust client's sandbox life cycle, timed: create (waiting for RUNNING) → exec `hostname` →
//! delete, against the emulator named by `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` and
//! `CWSANDBOX_RUNNER_ID` (`benches/python-lifecycle` starts one with `--timing instant` and runs
//! this next to the Python client). `BENCH_ROUNDS` life cycles (default 50) after one warm-up;
//! prints the median, min and max. A measurement, not a test: nothing here fails on a figure.

use std::time::{Duration, Instant};

use cwsandbox_client::Client;

/// The times of one life cycle: start to RUNNING, exec, delete, and the whole.
struct Steps {
    run: Duration,
    exec: Duration,
    delete: Duration,
    total: Duration,
}

async fn once(client: &Client, runner: &str) -> Result<Steps, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let sandbox = client.sandbox().cks().runner_ids([runner.to_owned()]).run().await?;
    let running = Instant::now();
    let result = sandbox.exec_check(&["hostname"]).await?;
    let executed = Instant::now();
    sandbox.delete().await?;
    let deleted = Instant::now();
    let steps = Steps {
        run: running - started,
        exec: executed - running,
        delete: deleted - executed,
        total: deleted - started,
    };
    // Plain isolation shares the host's hostname: any name will do.
    if result.stdout_text().trim().is_empty() {
        return Err(format!("unexpected hostname {:?}", result.stdout_text()).into());
    }
    Ok(steps)
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
    let mut steps = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        steps.push(once(&client, &runner).await?);
    }
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let median = |step: fn(&Steps) -> Duration| {
        let mut samples: Vec<Duration> = steps.iter().map(step).collect();
        samples.sort();
        ms(samples[rounds / 2])
    };
    let mut totals: Vec<Duration> = steps.iter().map(|steps| steps.total).collect();
    totals.sort();
    // The steps' medians, on stderr: where the time goes, for BENCHMARKS.md.
    eprintln!(
        "steps (medians, ms): run to RUNNING {:.2}, exec {:.2}, delete {:.2}",
        median(|steps| steps.run),
        median(|steps| steps.exec),
        median(|steps| steps.delete)
    );
    println!(
        "{{\"median_ms\": {:.2}, \"min_ms\": {:.2}, \"max_ms\": {:.2}, \"rounds\": {rounds}}}",
        ms(totals[rounds / 2]),
        ms(totals[0]),
        ms(totals[rounds - 1])
    );
    Ok(())
}
