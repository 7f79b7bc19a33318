//! The emulator's clock: wall time, which the emulator API can freeze and move forward. The
//! simulation reads it through [`cwsandbox_sim::time::Clock`]; it never goes backwards.
//!
//! Every read of the world asks it the time, from many threads at once, so it takes no lock: its
//! whole setting (running with an offset, or frozen at a time) is one atomic word, changed by
//! compare-and-swap, and the latest time handed out is another.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cwsandbox_sim::time::{Clock, SimTime};

/// How the clock runs, packed into one word so that freezing, resuming and advancing each change
/// it in one step: the milliseconds shifted left by one, the low bit set while frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    /// Wall time plus this many milliseconds (grows with every advance while running).
    Running { offset_millis: i64 },
    /// Time stands at this many milliseconds since the epoch.
    Frozen { at_millis: i64 },
}

impl Setting {
    fn pack(self) -> i64 {
        match self {
            Setting::Running { offset_millis } => offset_millis.wrapping_shl(1),
            Setting::Frozen { at_millis } => at_millis.wrapping_shl(1) | 1,
        }
    }

    fn unpack(word: i64) -> Setting {
        // An arithmetic shift: a negative offset stays negative.
        let millis = word >> 1;
        if word & 1 == 1 { Setting::Frozen { at_millis: millis } } else { Setting::Running { offset_millis: millis } }
    }

    /// The time this setting shows at wall time `wall`.
    fn shows(self, wall: i64) -> i64 {
        match self {
            Setting::Running { offset_millis } => wall.saturating_add(offset_millis),
            Setting::Frozen { at_millis } => at_millis,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// A packed [`Setting`]; zero is running at wall time.
    setting: AtomicI64,
    /// The latest time handed out, so a wall clock stepping back cannot move time backwards.
    last_millis: AtomicI64,
}

/// A shared handle; clones see and move the same time.
#[derive(Debug, Clone, Default)]
pub struct EmulatorClock {
    state: Arc<State>,
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

/// The largest frozen time or offset a setting word holds (one bit is the tag).
const LARGEST_MILLIS: i64 = i64::MAX >> 1;

impl EmulatorClock {
    /// A running clock at wall time.
    pub fn new() -> EmulatorClock {
        EmulatorClock::default()
    }

    fn setting(&self) -> Setting {
        Setting::unpack(self.state.setting.load(Ordering::SeqCst))
    }

    /// Changes the setting in one step, however many threads change it at once.
    fn change(&self, mut change: impl FnMut(Setting) -> Setting) {
        let _ = self
            .state
            .setting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| Some(change(Setting::unpack(word)).pack()));
    }

    /// `shown`, or the latest time handed out if that is later: time never goes backwards.
    fn not_before_last(&self, shown: i64) -> i64 {
        let last = self.state.last_millis.load(Ordering::SeqCst);
        if shown <= last {
            return last;
        }
        self.state.last_millis.fetch_max(shown, Ordering::SeqCst).max(shown)
    }

    /// Whether time stands still.
    pub fn is_frozen(&self) -> bool {
        matches!(self.setting(), Setting::Frozen { .. })
    }

    /// Stops time at its current value.
    pub fn freeze(&self) {
        self.change(|setting| match setting {
            Setting::Running { .. } => {
                Setting::Frozen { at_millis: self.not_before_last(setting.shows(wall_millis())).min(LARGEST_MILLIS) }
            }
            frozen => frozen,
        });
    }

    /// Lets time run again from where it stands.
    pub fn resume(&self) {
        self.change(|setting| match setting {
            Setting::Frozen { at_millis } => {
                Setting::Running { offset_millis: at_millis.saturating_sub(wall_millis()) }
            }
            running => running,
        });
    }

    /// Moves time forward, frozen or not.
    pub fn advance(&self, by: Duration) {
        let by = millis(by);
        self.change(|setting| match setting {
            Setting::Frozen { at_millis } => {
                Setting::Frozen { at_millis: at_millis.saturating_add(by).min(LARGEST_MILLIS) }
            }
            Setting::Running { offset_millis } => {
                Setting::Running { offset_millis: offset_millis.saturating_add(by).min(LARGEST_MILLIS) }
            }
        });
    }

    /// How long, in real time, until the clock shows `at`; `None` while frozen (only an advance
    /// gets there).
    pub fn real_time_until(&self, at: SimTime) -> Option<Duration> {
        if self.is_frozen() {
            return None;
        }
        Some(at.since(self.now()))
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
        SimTime::from_millis(self.not_before_last(self.setting().shows(wall_millis())))
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

    #[test]
    fn a_setting_survives_its_packing_negative_offsets_included() {
        for setting in [
            Setting::Running { offset_millis: 0 },
            Setting::Running { offset_millis: -86_400_000 },
            Setting::Running { offset_millis: 3_600_000 },
            Setting::Frozen { at_millis: 1_764_480_000_000 },
            Setting::Frozen { at_millis: LARGEST_MILLIS },
        ] {
            assert_eq!(Setting::unpack(setting.pack()), setting);
        }
        assert_eq!(Setting::unpack(0), Setting::Running { offset_millis: 0 }, "the default runs at wall time");
    }

    #[test]
    fn threads_reading_and_advancing_at_once_never_see_time_go_back() {
        let clock = EmulatorClock::new();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                let clock = clock.clone();
                scope.spawn(move || {
                    let mut previous = clock.now();
                    for _ in 0..20_000 {
                        let now = clock.now();
                        assert!(now >= previous, "{now:?} < {previous:?}");
                        previous = now;
                    }
                });
            }
            let clock = clock.clone();
            scope.spawn(move || {
                for round in 0..200 {
                    clock.advance(Duration::from_millis(5));
                    if round % 50 == 0 {
                        clock.freeze();
                        clock.resume();
                    }
                }
            });
        });
    }
}
