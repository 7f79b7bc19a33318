//! Reads of one sandbox by id, as GetSandbox does them, from 1 and 2 threads with 100 and 5,000
//! live sandboxes: through the command path (the world's write lock and a tick, as every read
//! was before reads shared the lock), through [`Driver::read_world`] (the lock shared) and
//! through [`Driver::sandbox_view`] (the views published after each command, no lock), the
//! threads reading the same sandbox (the worst case: they share its reference count) and each its
//! own. Then one reader beside a writer that runs commands without pause: how many reads each
//! path serves while commands hold the world's lock, and how many commands the writer gets
//! through. Prints per-second figures; they go to BENCHMARKS.md.
//! Run: `cargo bench -p cwsandbox-host --bench world_reads`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Reads per second of one thread calling `read` `reads` times while another runs `write` without
/// pause, and the writer's commands per second meanwhile.
fn beside_a_writer(reads: usize, read: &(dyn Fn() + Sync), write: &(dyn Fn(usize) + Sync)) -> (f64, f64) {
    let done = AtomicBool::new(false);
    let written = AtomicUsize::new(0);
    let start = Instant::now();
    let read_rate = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut count = 0;
            while !done.load(Ordering::Relaxed) {
                write(count);
                count += 1;
            }
            written.store(count, Ordering::Relaxed);
        });
        for _ in 0..reads {
            read();
        }
        let rate = reads as f64 / start.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
        rate
    });
    (read_rate, written.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

fn main() {
    let reads = reads_per_thread();
    println!(
        "reads of one sandbox by id, {reads} per thread, median of {ROUNDS} rounds; {} cores available",
        std::thread::available_parallelism().map_or(0, |cores| cores.get())
    );
    println!(
        "{:>6} {:>8} {:>14} {:>16} {:>16} {:>16} {:>16}",
        "live", "threads", "command, same", "read_world, same", "read_world, own", "published, same", "published, own"
    );
    let mut drivers = Vec::new();
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
        let published_same = |_: usize| {
            let view = driver.organization_sandbox(ORG, same).expect("readable");
            std::hint::black_box(view);
        };
        let published_own = |thread: usize| {
            let view = driver.organization_sandbox(ORG, &ids[thread * 7 % live]).expect("readable");
            std::hint::black_box(view);
        };
        let paths: [&(dyn Fn(usize) + Sync); 5] = [&as_command, &shared, &own, &published_same, &published_own];
        for threads in THREAD_COUNTS {
            let mut figures: [Vec<f64>; 5] = Default::default();
            // Alternated, so a noisy moment costs every path alike.
            for _ in 0..ROUNDS {
                for (path, read) in paths.iter().enumerate() {
                    figures[path].push(throughput(threads, reads, *read));
                }
            }
            let [command, shared, own, published_same, published_own] = figures.map(median);
            println!(
                "{live:>6} {threads:>8} {command:>14.0} {shared:>16.0} {own:>16.0} {published_same:>16.0} {published_own:>16.0}"
            );
        }
        drivers.push((live, driver, ids));
    }

    println!("one reader beside a writer running commands without pause (each publishes a sandbox's services)");
    println!(
        "{:>6} {:>20} {:>22} {:>20} {:>22}",
        "live", "read_world (1/s)", "writer's commands (1/s)", "published (1/s)", "writer's commands (1/s)"
    );
    for (live, driver, ids) in &drivers {
        let same = &ids[live / 2];
        let write = |count: usize| {
            let id = &ids[count % live];
            driver.with_world(|world| world.publish_services(id, Vec::new(), None));
        };
        let locked = || {
            std::hint::black_box(driver.read_world(|world| world.get_sandbox(ORG, same)).expect("readable"));
        };
        let published = || {
            std::hint::black_box(driver.organization_sandbox(ORG, same).expect("readable"));
        };
        let mut figures: [Vec<f64>; 4] = Default::default();
        for _ in 0..ROUNDS {
            let (read_rate, write_rate) = beside_a_writer(reads, &locked, &write);
            figures[0].push(read_rate);
            figures[1].push(write_rate);
            let (read_rate, write_rate) = beside_a_writer(reads, &published, &write);
            figures[2].push(read_rate);
            figures[3].push(write_rate);
        }
        let [locked, locked_writes, published, published_writes] = figures.map(median);
        println!("{live:>6} {locked:>20.0} {locked_writes:>22.0} {published:>20.0} {published_writes:>22.0}");
    }
}
