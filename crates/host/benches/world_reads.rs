//! Reads of one sandbox by id, as GetSandbox does them, from 1 and 2 threads with 100 and 5,000
//! live sandboxes: through the command path (the world's write lock and a tick, as every read
//! was before reads shared the lock) and through [`Driver::read_world`], the threads reading the
//! same sandbox (the worst case: they share its reference count) and each its own. Prints reads
//! per second of each; the figures go to BENCHMARKS.md.
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

/// A driver whose world runs `live` sandboxes, and the ids of all of them.
fn driver_with(live: usize) -> (Arc<Driver>, Vec<String>) {
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
    (driver, ids)
}

/// Reads per second of `threads` threads each calling `read` `reads` times with its index.
fn throughput(threads: usize, reads: usize, read: &(dyn Fn(usize) + Sync)) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                for _ in 0..reads {
                    read(thread);
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
    println!(
        "{:>6} {:>8} {:>26} {:>26} {:>26}",
        "live", "threads", "command path, same (1/s)", "read_world, same (1/s)", "read_world, own (1/s)"
    );
    for live in LIVE_COUNTS {
        let (driver, ids) = driver_with(live);
        let same = &ids[live / 2];
        let as_command = |_: usize| {
            let view = driver.with_world(|world| world.get_sandbox(ORG, same)).expect("readable");
            std::hint::black_box(view);
        };
        let shared = |_: usize| {
            let view = driver.read_world(|world| world.get_sandbox(ORG, same)).expect("readable");
            std::hint::black_box(view);
        };
        let own = |thread: usize| {
            let view = driver.read_world(|world| world.get_sandbox(ORG, &ids[thread * 7 % live])).expect("readable");
            std::hint::black_box(view);
        };
        for threads in THREAD_COUNTS {
            let mut figures = [Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS)];
            // Alternated, so a noisy moment costs every path alike.
            for _ in 0..ROUNDS {
                figures[0].push(throughput(threads, reads, &as_command));
                figures[1].push(throughput(threads, reads, &shared));
                figures[2].push(throughput(threads, reads, &own));
            }
            let [command, shared, own] = figures.map(median);
            println!("{live:>6} {threads:>8} {command:>26.0} {shared:>26.0} {own:>26.0}");
        }
    }
}
