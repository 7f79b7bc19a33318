//! The emulator's clock: wall time, which the emulator API can freeze and move forward. The
//! simulation reads it through [`cwsandbox_sim::time::Clock`]; it never goes backwards.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cwsandbox_sim::time::{Clock, SimTime};
use cwsandbox_sync::MutexUnpoisoned;

#[derive(Debug, Default)]
struct State {
    /// Added to the wall clock (grows with every advance while running).
    offset_millis: i64,
    /// Set while frozen: the time stands here.
    frozen_at: Option<SimTime>,
    /// The latest time handed out, so a wall clock stepping back cannot move time backwards.
    last: SimTime,
}

/// A shared handle; clones see and move the same time.
#[derive(Debug, Clone, Default)]
pub struct EmulatorClock {
    /// A panic while holding this lock cannot leave the state inconsistent.
    state: Arc<Mutex<State>>,
}

fn wall_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl EmulatorClock {
    /// A running clock at wall time.
    pub fn new() -> EmulatorClock {
        EmulatorClock::default()
    }

    fn now_locked(state: &mut State) -> SimTime {
        let now = state.frozen_at.unwrap_or(SimTime::from_millis(wall_millis().saturating_add(state.offset_millis)));
        state.last = state.last.max(now);
        state.last
    }

    /// Whether time stands still.
    pub fn is_frozen(&self) -> bool {
        self.state.lock_unpoisoned().frozen_at.is_some()
    }

    /// Stops time at its current value.
    pub fn freeze(&self) {
        let mut state = self.state.lock_unpoisoned();
        let now = Self::now_locked(&mut state);
        state.frozen_at = Some(now);
    }

    /// Lets time run again from where it stands.
    pub fn resume(&self) {
        let mut state = self.state.lock_unpoisoned();
        if let Some(frozen) = state.frozen_at.take() {
            state.offset_millis = frozen.millis().saturating_sub(wall_millis());
        }
    }

    /// Moves time forward, frozen or not.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state.lock_unpoisoned();
        match &mut state.frozen_at {
            Some(frozen) => *frozen = *frozen + by,
            None => state.offset_millis = state.offset_millis.saturating_add(millis(by)),
        }
    }

    /// How long, in real time, until the clock shows `at`; `None` while frozen (only an advance
    /// gets there).
    pub fn real_time_until(&self, at: SimTime) -> Option<Duration> {
        let mut state = self.state.lock_unpoisoned();
        if state.frozen_at.is_some() {
            return None;
        }
        let now = Self::now_locked(&mut state);
        Some(at.since(now))
    }

    /// A simulated time as a wall-clock time.
    pub fn to_system_time(time: SimTime) -> SystemTime {
        match u64::try_from(time.millis()) {
            Ok(millis) => UNIX_EPOCH + Duration::from_millis(millis),
            Err(_) => UNIX_EPOCH,
        }
    }
}

impl Clock for EmulatorClock {
    fn now(&self) -> SimTime {
        Self::now_locked(&mut self.state.lock_unpoisoned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_wall_clock_and_advances() {
        let clock = EmulatorClock::new();
        let before = wall_millis();
        let now = clock.now().millis();
        assert!((now - before).abs() < 1000);
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now().millis() >= before + 3_600_000);
    }

    #[test]
    fn frozen_time_moves_only_when_advanced_and_never_back() {
        let clock = EmulatorClock::new();
        clock.freeze();
        let frozen = clock.now();
        assert!(clock.is_frozen());
        assert_eq!(clock.now(), frozen);
        assert_eq!(clock.real_time_until(frozen + Duration::from_secs(1)), None);
        clock.advance(Duration::from_secs(90));
        assert_eq!(clock.now(), frozen + Duration::from_secs(90));
        clock.resume();
        assert!(clock.now() >= frozen + Duration::from_secs(90), "resuming continues from the frozen time");
        assert!(!clock.is_frozen());
    }
}
