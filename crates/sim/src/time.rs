//! Simulated time. The world never reads a wall clock: the caller sets and advances it, so a
//! seeded world replays identically and tests never sleep.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A point in simulated time: milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub i64);

impl SimTime {
    /// From milliseconds since the epoch.
    pub const fn from_millis(millis: i64) -> SimTime {
        SimTime(millis)
    }

    /// From whole seconds since the epoch.
    pub const fn from_secs(seconds: i64) -> SimTime {
        SimTime(seconds * 1000)
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (floor).
    pub const fn secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// The time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: SimTime) -> Duration {
        Duration::from_millis((self.0 - earlier.0).max(0) as u64)
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, duration: Duration) -> SimTime {
        SimTime(self.0.saturating_add(duration.as_millis().min(i64::MAX as u128) as i64))
    }
}

impl Sub<Duration> for SimTime {
    type Output = SimTime;
    fn sub(self, duration: Duration) -> SimTime {
        SimTime(self.0.saturating_sub(duration.as_millis().min(i64::MAX as u128) as i64))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Where the simulation's "now" comes from. The world holds one and only asks it; the emulator
/// plugs a wall clock in (or a frozen one), tests a [`ManualClock`]. `Sync`, because the host
/// lets many readers share the world at once.
pub trait Clock: Send + Sync {
    /// The current simulated time.
    fn now(&self) -> SimTime;
}

/// A clock that moves only when told to. Clones share the same time, so a test keeps one handle
/// and gives another to the world.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock stopped at `now`.
    pub fn new(now: SimTime) -> ManualClock {
        ManualClock { now_millis: Arc::new(AtomicI64::new(now.0)) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let millis = by.as_millis().min(i64::MAX as u128) as i64;
        self.now_millis.fetch_add(millis, Ordering::SeqCst);
    }

    /// Sets the clock; it never goes backwards.
    pub fn set(&self, to: SimTime) {
        self.now_millis.fetch_max(to.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SimTime {
        SimTime(self.now_millis.load(Ordering::SeqCst))
    }
}

/// Names one scheduled timer (`world::Timers`), so it can be cancelled: kept here, below the
/// lifecycles, because a sandbox holds its lifetime timer's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerKey {
    pub(crate) at: SimTime,
    pub(crate) sequence: u64,
}
