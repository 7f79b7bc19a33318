//! Speed and memory of the world at scale: a 10,000-node cluster running 100,000 sandbox life
//! cycles through SUNK and Slurm. Prints placements per second and bytes per live sandbox.
//! Run: `cargo bench -p cwsandbox-sim --bench world` (figures go to BENCHMARKS.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use cwsandbox_api::sandbox_v1::{Container, ResourceRequirements, Resources, SandboxMode, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::ids::SeededIds;
use cwsandbox_sim::sandbox::{Owner, SandboxState};
use cwsandbox_sim::time::{ManualClock, SimTime};
use cwsandbox_sim::world::World;

/// Counts live heap bytes, so memory per sandbox is measured, not guessed.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: u32 = 10_000;
const BATCH: usize = 1_000;
const LIVE: usize = 20_000;

/// `BENCH_lifecycles` shrinks the run for profiling; the recorded figures use the default.
fn lifecycles() -> usize {
    std::env::var("BENCH_lifecycles").ok().and_then(|text| text.parse().ok()).unwrap_or(100_000)
}

/// `BENCH_live` shrinks the memory run for profiling; the recorded figures use the default.
fn live() -> usize {
    std::env::var("BENCH_live").ok().and_then(|text| text.parse().ok()).unwrap_or(LIVE)
}

fn world() -> (World, ManualClock) {
    let mut values = Values::scenario(Scenario::Ready);
    values.node_sets[0].replicas = NODES;
    values.node_sets[0].cpu = "64".to_owned();
    values.node_sets[0].memory = "256Gi".to_owned();
    values.sandboxes.event_capacity = 10_000;
    values.sandboxes.retention_seconds = 1;
    let clock = ManualClock::new(SimTime::from_secs(1_764_480_000));
    let world = World::new(values, Box::new(clock.clone()), Box::new(SeededIds::new(7))).expect("values");
    (world, clock)
}

fn spec() -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            resource_requirements: Some(ResourceRequirements {
                requests: Some(Resources { cpu: "500m".to_owned(), memory: "1Gi".to_owned(), gpu: None }),
                limits: None,
            }),
            ..Container::default()
        }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    }
}

/// A uuid4-shaped request id, as the Python client sends with every create.
fn request_id(sequence: &mut u64) -> String {
    *sequence += 1;
    format!("{:08x}-0000-4000-8000-{:012x}", *sequence >> 16, *sequence)
}

fn main() {
    let mut sequence = 0u64;
    let owner = Owner { org: "default-org".to_owned(), user: "alice".to_owned() };
    let build = Instant::now();
    let (mut world, clock) = world();
    println!("cluster: {NODES} nodes built in {:.2?}", build.elapsed());

    // Life cycles. Placement: create (validate, resolve the policy, submit the placeholder,
    // allocate a node) and run (prolog, bind, kubelet admission). Teardown: read, delete, release.
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut placing = Duration::ZERO;
    let mut tearing_down = Duration::ZERO;
    let mut placed = 0usize;
    let mut batch = Vec::with_capacity(BATCH);
    let lifecycles = lifecycles();
    for _ in 0..lifecycles / BATCH {
        let start = Instant::now();
        for _ in 0..BATCH {
            batch
                .push(world.create_sandbox(&owner, spec(), "", &request_id(&mut sequence)).expect("create").id.clone());
        }
        clock.advance(Duration::from_secs(1));
        world.tick();
        placing += start.elapsed();
        let start = Instant::now();
        for id in batch.drain(..) {
            if world.get_sandbox("default-org", &id).expect("readable").state == SandboxState::Running {
                placed += 1;
            }
            world.delete_sandbox("default-org", &id, 0).expect("delete");
        }
        clock.advance(Duration::from_secs(2));
        world.tick();
        world.take_effects();
        tearing_down += start.elapsed();
    }
    assert_eq!(placed, lifecycles, "every sandbox ran");
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
    println!("allocations: {} per life cycle", allocations / lifecycles as isize);
    println!(
        "placements: {lifecycles} in {placing:.2?} = {:.0} placements/s (create through Running)",
        lifecycles as f64 / placing.as_secs_f64()
    );
    println!(
        "life cycles: {lifecycles} in {:.2?} = {:.0}/s (placement + read + delete + release)",
        placing + tearing_down,
        lifecycles as f64 / (placing + tearing_down).as_secs_f64()
    );

    // Memory: bytes held per live (running) sandbox, with its Pod, job, record and events.
    let (mut world, clock) = self::world();
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut ids = Vec::with_capacity(live());
    for _ in 0..live() {
        ids.push(world.create_sandbox(&owner, spec(), "", &request_id(&mut sequence)).expect("create").id.clone());
    }
    clock.advance(Duration::from_secs(1));
    world.tick();
    world.take_effects();
    let live = ids
        .iter()
        .filter(|id| world.get_sandbox("default-org", id).is_ok_and(|view| view.state == SandboxState::Running))
        .count();
    // The ids are shared with the world (a count, not a copy): only the vector is the bench's own.
    let ids_bytes = ids.capacity() * std::mem::size_of_val(&ids[0]);
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    let per_sandbox = (after - before - ids_bytes as isize) as f64 / live as f64;
    println!("memory: {live} live sandboxes hold {:.0} bytes each ({:.2} KiB)", per_sandbox, per_sandbox / 1024.0);
}
