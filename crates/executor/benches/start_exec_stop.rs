//! The executor's part of a sandbox's life cycle, without the API: start (idle main command),
//! exec `hostname`, stop; with sandboxes started ahead of need and without, the roots on the
//! temporary directory's file system and in memory (/dev/shm, where it can be had). Medians of
//! `BENCH_ROUNDS` (default 60) per step, on stdout. Run with
//! `cargo bench -p cwsandbox-executor --bench start_exec_stop`; figures in BENCHMARKS.md.

use std::time::{Duration, Instant};

use cwsandbox_executor::{ExecRequest, Executor, ExecutorConfig, Isolation, LaunchSpec};

fn median(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

async fn measure(
    parent: &std::path::Path,
    warm_sandboxes: usize,
    rounds: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let root = tempfile::Builder::new().prefix("cwsbx-bench").tempdir_in(parent)?;
    let mut config = ExecutorConfig::new(root.path());
    config.isolation = Isolation::Namespaces;
    config.warm_sandboxes = warm_sandboxes;
    let executor = Executor::new(config)?;
    executor.ready_ahead().await;
    let (mut starts, mut execs, mut stops, mut totals) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let id = format!("bench-{round}");
        let began = Instant::now();
        executor.start(&id, LaunchSpec { hostname: "bench".into(), ..LaunchSpec::default() }).await?;
        let started = Instant::now();
        let request = ExecRequest { argv: vec!["hostname".into()], ..ExecRequest::default() };
        let (stdout, _, code) = executor.exec(&id, request).await?.collect().await;
        if code != 0 || stdout != b"bench\n" {
            return Err(format!("exec gave {code} {:?}", String::from_utf8_lossy(&stdout)).into());
        }
        let executed = Instant::now();
        executor.stop(&id, Duration::from_secs(10)).await;
        let stopped = Instant::now();
        executor.remove(&id).await;
        // The first round warms caches.
        if round > 0 {
            starts.push(started - began);
            execs.push(executed - started);
            stops.push(stopped - executed);
            totals.push(stopped - began);
        }
    }
    executor.shutdown().await;
    Ok(format!(
        "start {:.2}, exec {:.2}, stop {:.2}, total {:.2} ms",
        median(&mut starts),
        median(&mut execs),
        median(&mut stops),
        median(&mut totals)
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(60).max(1);
    let mut parents = vec![("temporary directory", std::env::temp_dir())];
    parents.extend(cwsandbox_executor::memory_backed_dir().map(|dir| ("memory", dir)));
    for _ in 0..2 {
        for (place, parent) in &parents {
            for (label, warm) in [("from scratch", 0), ("started ahead", 2)] {
                println!("{place:>19}, {label:>13}: {}", measure(parent, warm, rounds).await?);
            }
        }
    }
    Ok(())
}
