//! The one idiom every lifecycle in the world follows: a phase enum, named transitions listed in
//! `ALL`, a `transition` that applies one or refuses it with [`IllegalTransition`], and counters
//! keyed by transition so tests can check that each machine's every transition was exercised.

use std::fmt;
use std::marker::PhantomData;

/// The named transitions of one lifecycle (a fieldless enum).
pub trait Transition: Copy + Eq + fmt::Debug + 'static {
    /// What the machine is, for messages ("runner", "job"…).
    const MACHINE: &'static str;
    /// Every transition, in declaration order.
    const ALL: &'static [Self];
    /// A stable name for logs and counters.
    fn name(self) -> &'static str;
    /// Position in [`Transition::ALL`].
    fn index(self) -> usize {
        Self::ALL.iter().position(|candidate| *candidate == self).unwrap_or(0)
    }
}

/// A transition was asked for in a state that does not allow it. Inside the simulation this
/// means a precondition check was missed; callers outside see it as FAILED_PRECONDITION.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transition {} is not allowed while the {} is {state}", transition.name(), T::MACHINE)]
pub struct IllegalTransition<T: Transition> {
    /// What was attempted.
    pub transition: T,
    /// The state it was attempted in.
    pub state: &'static str,
}

/// How often each transition of one machine ran.
#[derive(Clone)]
pub struct Counts<T: Transition> {
    counts: Vec<u64>,
    machine: PhantomData<T>,
}

impl<T: Transition> Default for Counts<T> {
    fn default() -> Self {
        Counts { counts: vec![0; T::ALL.len()], machine: PhantomData }
    }
}

impl<T: Transition> fmt::Debug for Counts<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(transition, count)| (transition.name(), count))).finish()
    }
}

impl<T: Transition> Counts<T> {
    /// Counts one run of `transition`.
    pub fn add(&mut self, transition: T) {
        self.counts[transition.index()] += 1;
    }

    /// How often `transition` ran.
    pub fn get(&self, transition: T) -> u64 {
        self.counts[transition.index()]
    }

    /// Every transition that ran at least once, with its count, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (T, u64)> + '_ {
        T::ALL.iter().map(|transition| (*transition, self.get(*transition))).filter(|(_, count)| *count > 0)
    }

    /// The transitions that never ran: what a coverage test reports.
    pub fn never_run(&self) -> Vec<T> {
        T::ALL.iter().copied().filter(|transition| self.get(*transition) == 0).collect()
    }

    /// Adds another machine's counts (the same machine's, in another world).
    pub fn merge(&mut self, other: &Counts<T>) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Door {
        Open,
        Close,
    }

    impl Transition for Door {
        const MACHINE: &'static str = "door";
        const ALL: &'static [Door] = &[Door::Open, Door::Close];
        fn name(self) -> &'static str {
            match self {
                Door::Open => "Open",
                Door::Close => "Close",
            }
        }
    }

    #[test]
    fn counts_are_kept_per_transition_and_report_what_never_ran() {
        let mut counts = Counts::<Door>::default();
        counts.add(Door::Close);
        counts.add(Door::Close);
        assert_eq!(counts.get(Door::Close), 2);
        assert_eq!(counts.get(Door::Open), 0);
        assert_eq!(counts.iter().collect::<Vec<_>>(), [(Door::Close, 2)]);
        assert_eq!(counts.never_run(), [Door::Open]);
        let mut total = Counts::<Door>::default();
        total.merge(&counts);
        total.add(Door::Open);
        assert!(total.never_run().is_empty());
    }

    #[test]
    fn an_illegal_transition_names_the_machine_and_state() {
        let illegal = IllegalTransition { transition: Door::Open, state: "LOCKED" };
        assert_eq!(illegal.to_string(), "transition Open is not allowed while the door is LOCKED");
    }
}
