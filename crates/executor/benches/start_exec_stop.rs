//! The executor's part of a sandbox's life cycle, without the API: start (idle main command),
//! exec `hostname`, stop; with sandboxes started ahead of need and without, the roots on the
//! temporary directory's file system and in memory (/dev/shm, where it can be had). Medians of
//! `BENCH_ROUNDS` (default 60) per step, on stdout. Run with
//! `cargo bench -p cwsandbox-executor --bench start_exec_stop`; figures in BENCHMARKS.md.
//!
//! Where runc and busybox are installed (and the bench runs as root), an image sandbox too:
//! start in a busybox image through runc (a main command that ends on SIGTERM), exec
//! `hostname` with `runc exec`, stop. And file operations (write, read) in a running sandbox.

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
    life_cycles(&executor, rounds, |_| LaunchSpec { hostname: "bench".into(), ..LaunchSpec::default() }).await
}

/// `rounds` life cycles (and one before them that warms caches) of sandboxes launched as
/// `launch` says: start, exec `hostname` (which must print `bench`), stop; the medians.
async fn life_cycles(
    executor: &Executor,
    rounds: usize,
    launch: impl Fn(usize) -> LaunchSpec,
) -> Result<String, Box<dyn std::error::Error>> {
    let (mut starts, mut execs, mut stops, mut totals) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let id = format!("bench-{round}");
        let began = Instant::now();
        executor.start(&id, launch(round)).await?;
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

/// A busybox image root in `dir`, owned by the sandboxes' id range.
fn busybox_image(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let image = dir.join("image");
    std::fs::create_dir_all(image.join("bin"))?;
    std::fs::copy("/bin/busybox", image.join("bin/busybox"))?;
    for applet in ["sh", "hostname", "sleep"] {
        std::os::unix::fs::symlink("busybox", image.join("bin").join(applet))?;
    }
    let owner = format!("{0}:{0}", cwsandbox_executor::DEFAULT_SANDBOX_ID_BASE);
    std::process::Command::new("chown").args(["-R", "-h", &owner]).arg(&image).status()?;
    Ok(image)
}

async fn measure_image(parent: &std::path::Path, rounds: usize) -> Result<String, Box<dyn std::error::Error>> {
    let root = tempfile::Builder::new().prefix("cwsbx-bench").tempdir_in(parent)?;
    let image = busybox_image(root.path())?;
    let mut config = ExecutorConfig::new(root.path().join("sandboxes"));
    config.warm_sandboxes = 0;
    config.oci_runtime = Some("/usr/sbin/runc".into());
    let executor = Executor::new(config)?;
    if !matches!(executor.oci(), cwsandbox_executor::OciSupport::Ready(_)) {
        return Err(format!("runc does not work here: {:?}", executor.oci()).into());
    }
    life_cycles(&executor, rounds, |_| LaunchSpec {
        hostname: "bench".into(),
        command: ["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"].map(str::to_owned).to_vec(),
        image: Some(cwsandbox_executor::ImageRoot { rootfs: image.clone() }),
        ..LaunchSpec::default()
    })
    .await
}

/// gVisor sandboxes (`RuntimeHandler::Runsc`) in an unshifted busybox image: life cycles, then
/// file operations (each a `runsc exec` of the helper).
async fn measure_gvisor(parent: &std::path::Path, rounds: usize) -> Result<String, Box<dyn std::error::Error>> {
    let root = tempfile::Builder::new().prefix("cwsbx-bench").tempdir_in(parent)?;
    let image = busybox_image(root.path())?;
    // gVisor's trees keep the image's own ids.
    std::process::Command::new("chown").args(["-R", "-h", "0:0"]).arg(&image).status()?;
    let mut config = ExecutorConfig::new(root.path().join("sandboxes"));
    config.warm_sandboxes = 0;
    config.gvisor_runtime = Some("/usr/bin/runsc".into());
    let probe = Instant::now();
    let executor = Executor::new(config)?;
    let probed = probe.elapsed();
    if !matches!(executor.gvisor(), cwsandbox_executor::OciSupport::Ready(_)) {
        return Err(format!("runsc does not work here: {:?}", executor.gvisor()).into());
    }
    let launch = |_: usize| LaunchSpec {
        hostname: "bench".into(),
        command: ["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"].map(str::to_owned).to_vec(),
        image: Some(cwsandbox_executor::ImageRoot { rootfs: image.clone() }),
        handler: cwsandbox_executor::RuntimeHandler::Runsc,
        ..LaunchSpec::default()
    };
    executor.start("files", launch(0)).await?;
    let files = file_round_trips(&executor, "files", rounds).await?;
    executor.kill("files").await;
    // (Shuts the executor down at its end.)
    let cycles = life_cycles(&executor, rounds, &launch).await?;
    Ok(format!("{cycles}; {files}; the executor's probe {:.0} ms", probed.as_secs_f64() * 1000.0))
}

/// File operations through the API in one running sandbox: each opens its file in a helper with
/// the sandbox's credentials in its namespaces (a zygote fork, two setns, a chroot); medians of
/// `rounds` writes of 1 KiB to /tmp and reads of it.
async fn measure_files(parent: &std::path::Path, rounds: usize) -> Result<String, Box<dyn std::error::Error>> {
    let root = tempfile::Builder::new().prefix("cwsbx-bench").tempdir_in(parent)?;
    let mut config = ExecutorConfig::new(root.path());
    config.isolation = Isolation::Namespaces;
    let executor = Executor::new(config)?;
    executor.start("files", LaunchSpec { hostname: "bench".into(), ..LaunchSpec::default() }).await?;
    let files = file_round_trips(&executor, "files", rounds).await?;
    executor.shutdown().await;
    Ok(files)
}

/// Medians of `rounds` writes of 1 KiB to /tmp of running sandbox `id` through the API, and of
/// reads of it (after one round not counted).
async fn file_round_trips(executor: &Executor, id: &str, rounds: usize) -> Result<String, Box<dyn std::error::Error>> {
    let content = vec![b'x'; 1024];
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let began = Instant::now();
        executor.write_file(id, "/tmp/bench.bin", &content).await?;
        let written = Instant::now();
        if executor.read_file(id, "/tmp/bench.bin").await? != content {
            return Err("read back something else".into());
        }
        if round > 0 {
            writes.push(written - began);
            reads.push(written.elapsed());
        }
    }
    Ok(format!("write 1 KiB {:.2} ms, read it {:.2} ms", median(&mut writes), median(&mut reads)))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(60).max(1);
    if std::path::Path::new("/usr/sbin/runc").exists() && std::path::Path::new("/bin/busybox").exists() {
        // Fewer rounds: each is some 100 ms.
        let image_rounds = rounds.min(20);
        println!(
            "{:>19}, {:>13}: {}",
            "image (runc)",
            "overlay",
            measure_image(&std::env::temp_dir(), image_rounds).await?
        );
    } else {
        println!("image sandboxes: runc or busybox is not installed, not measured");
    }
    if std::path::Path::new("/usr/bin/runsc").exists() && std::path::Path::new("/bin/busybox").exists() {
        println!(
            "{:>19}, {:>13}: {}",
            "gvisor (runsc)",
            "overlay",
            measure_gvisor(&std::env::temp_dir(), rounds.min(20)).await?
        );
    } else {
        println!("gVisor sandboxes: runsc or busybox is not installed, not measured");
    }
    if std::env::var_os("BENCH_IMAGE_ONLY").is_some() {
        return Ok(());
    }
    println!("{:>19}, {:>13}: {}", "files", "namespaces", measure_files(&std::env::temp_dir(), rounds).await?);
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
