//! Reads of one sandbox by id, as GetSandbox does them, from 1 and 2 threads with 100 and 5,000
//! live sandboxes: through the command path (the world's write lock and a tick, as every read
//! was before reads shared the lock) and through [`Driver::read_world`]. Prints reads per second
//! of each; the figures go to BENCHMARKS.md.
//! Run: `cargo bench -p cwsandbox-host --bench world_reads`.

use std::sync::Arc;
use std::time::Instant;

use cwsandbox_api::sandbox_v1::{Container, ResourceRequirements, Resources, SandboxMode, SandboxSpec};
use cwsandbox_host::clock::EmulatorClock;
use cwsandbox_host::driver::Driver;
use cwsandbox_sim::config::{Scenario, Timing, Values};
use cwsandbox_sim::sandbox::{Owner, SandboxState};

const ORG: &str = "default-org";
const LIVE_COUNTS: [usize; 2] = [100, 5_000];
const THREAD_COUNTS: [usize; 2] = [1, 2];
/// Rounds per figure; the median is printed.
const ROUNDS: usize = 5;

/// `BENCH_reads` shrinks the run for a quick look; the recorded figures use the default.
fn reads_per_thread() -> usize {
    std::env::var("BENCH_reads").ok().and_then(|text| text.parse().ok()).unwrap_or(300_000)
}

fn values() -> Values {
    let mut values = Values::from_tree(Values::scenario_tree_timed(Scenario::Ready, Timing::Instant))
        .expect("the scenario's own values");
    values.node_sets[0].replicas = 100;
    values.node_sets[0].cpu = "64".to_owned();
    values.node_sets[0].memory = "256Gi".to_owned();
    values
}

fn spec() -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            resource_requirements: Some(ResourceRequirements {
                requests: Some(Resources { cpu: "100m".to_owned(), memory: "128Mi".to_owned(), gpu: None }),
                limits: None,
            }),
            ..Container::default()
        }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    }
}

/// A driver whose world runs `live` sandboxes, and the id of one of them.
fn driver_with(live: usize) -> (Arc<Driver>, String) {
    let (driver, _effects) = Driver::new(values(), EmulatorClock::new(), 7).expect("a world");
    let owner = Owner { org: ORG.to_owned(), user: "alice".to_owned() };
    let mut ids = Vec::with_capacity(live);
    for sequence in 0..live {
        let request_id = format!("00000000-0000-4000-8000-{sequence:012x}");
        let view = driver
            .with_world(|world| world.create_sandbox(&owner, spec(), "", &request_id))
            .expect("the sandbox is created");
        ids.push(view.id.to_string());
    }
    let running = ids
        .iter()
        .filter(|id| {
            driver.with_world(|world| world.get_sandbox(ORG, id)).is_ok_and(|view| view.state == SandboxState::Running)
        })
        .count();
    assert_eq!(running, live, "every sandbox runs before the reads");
    let read = ids[live / 2].clone();
    (driver, read)
}

/// Reads per second of `threads` threads each calling `read` `reads` times.
fn throughput(threads: usize, reads: usize, read: &(dyn Fn() + Sync)) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for _ in 0..reads {
                    read();
                }
            });
        }
    });
    (threads * reads) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut figures: Vec<f64>) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

fn main() {
    let reads = reads_per_thread();
    println!(
        "reads of one sandbox by id, {reads} per thread, median of {ROUNDS} rounds; {} cores available",
        std::thread::available_parallelism().map_or(0, |cores| cores.get())
    );
    println!("{:>8} {:>8} {:>24} {:>24}", "live", "threads", "command path (reads/s)", "read_world (reads/s)");
    for live in LIVE_COUNTS {
        let (driver, id) = driver_with(live);
        let as_command = || {
            let view = driver.with_world(|world| world.get_sandbox(ORG, &id)).expect("readable");
            std::hint::black_box(view);
        };
        let shared = || {
            let view = driver.read_world(|world| world.get_sandbox(ORG, &id)).expect("readable");
            std::hint::black_box(view);
        };
        for threads in THREAD_COUNTS {
            let mut command_figures = Vec::with_capacity(ROUNDS);
            let mut shared_figures = Vec::with_capacity(ROUNDS);
            // Alternated, so a noisy moment costs both paths alike.
            for _ in 0..ROUNDS {
                command_figures.push(throughput(threads, reads, &as_command));
                shared_figures.push(throughput(threads, reads, &shared));
            }
            println!("{live:>8} {threads:>8} {:>24.0} {:>24.0}", median(command_figures), median(shared_figures));
        }
    }
}
