//! The one idiom every lifecycle in the world follows: a phase enum, named transitions listed in
//! `ALL`, a `transition` that applies one or refuses it with [`IllegalTransition`], and counters
//! keyed by transition so tests can check that each machine's every transition was exercised.
//! Each machine is declared once, with the crate's `transitions!` and, for its phases, `phases!`:
//! a transition, its name and the phases it may start from are written on one line, so the enum,
//! `ALL`, `name()` and the table cannot drift apart.

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

/// The phases of one lifecycle (a fieldless enum), as its transitions' tables name them.
pub trait Phase: Copy + Eq + fmt::Debug + 'static {
    /// Every phase, in declaration order.
    const ALL: &'static [Self];
    /// A stable name for messages: what an [`IllegalTransition`] says the state was.
    fn name(self) -> &'static str;
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

/// A transition the world's own bookkeeping has checked is legal. A refusal is a missed
/// precondition, a bug: loud in debug builds (every test), while a release build leaves the
/// machine as it was rather than take the emulator down.
pub(crate) fn legal<T, M: Transition>(result: Result<T, IllegalTransition<M>>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(illegal) => {
            if cfg!(debug_assertions) {
                panic!("{illegal}");
            }
            None
        }
    }
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

/// Declares one machine's transitions in one place: the enum with its doc comments and derive,
/// and its [`Transition`] impl (`MACHINE`, `ALL` in declaration order, `name()`). A transition's
/// name is its variant's unless a string follows `=>`.
///
/// A machine that checks its transitions against its phases (an enum declared with [`phases!`])
/// writes beside each transition the phases it may start from (`from [..]`; empty: it starts from
/// nothing, a creation) and may add where it leads (`to [..]`; empty: it leaves the world). It then
/// declares, after the enum, the signature of `allowed_from` (and of `leads_to`) with their doc
/// comments and visibility; the macro writes their bodies from the lists, and `check_from`, which
/// refuses a transition from a phase its list leaves out.
///
/// ```ignore
/// phases! {
///     /// Where a door stands.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum DoorPhase {
///         Ajar => "AJAR",
///         Shut => "SHUT",
///     }
/// }
///
/// transitions! {
///     machine "door";
///     /// What can happen to a door.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum DoorTransition {
///         /// Pulled open; named `Open`.
///         Open from [Shut],
///         /// Pushed shut; named `door_shut`.
///         Close => "door_shut" from [Ajar],
///     }
///     /// The phases each transition may start from.
///     pub fn allowed_from(self) -> &'static [DoorPhase];
/// }
///
/// assert_eq!(DoorTransition::ALL, [DoorTransition::Open, DoorTransition::Close]);
/// assert_eq!(DoorTransition::Close.name(), "door_shut");
/// assert_eq!(DoorTransition::Close.allowed_from(), [DoorPhase::Ajar]);
/// let refused = DoorTransition::Open.check_from(DoorPhase::Ajar).unwrap_err();
/// assert_eq!(refused.to_string(), "transition Open is not allowed while the door is AJAR");
/// ```
///
/// (Not a doctest, as the macro is the crate's own; the tests below declare such a door.)
macro_rules! transitions {
    // Names only: the machine checks its transitions in its own code (the runner's, the world's).
    (
        machine $machine:literal;
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$doc:meta])* $variant:ident $(=> $label:literal)?),+ $(,)?
        }
    ) => {
        $crate::machine::transitions!(@enum $machine; $(#[$meta])* $vis $name {
            $($(#[$doc])* $variant $(=> $label)?),+
        });
    };
    // Where each transition may start.
    (
        machine $machine:literal;
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$doc:meta])* $variant:ident $(=> $label:literal)? from [$($from:ident),*]),+ $(,)?
        }
        $(#[$from_doc:meta])*
        $from_vis:vis fn allowed_from(self) -> &'static [$phase:ident];
    ) => {
        $crate::machine::transitions!(@enum $machine; $(#[$meta])* $vis $name {
            $($(#[$doc])* $variant $(=> $label)?),+
        });
        $crate::machine::transitions!(@allowed_from $name, $phase, $(#[$from_doc])* $from_vis fn {
            $($variant [$($from),*]),+
        });
    };
    // Where each transition may start, and where it leads.
    (
        machine $machine:literal;
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$doc:meta])*
                $variant:ident $(=> $label:literal)? from [$($from:ident),*] to [$($to:ident),*]
            ),+ $(,)?
        }
        $(#[$from_doc:meta])*
        $from_vis:vis fn allowed_from(self) -> &'static [$phase:ident];
        $(#[$to_doc:meta])*
        $to_vis:vis fn leads_to(self) -> &'static [$to_phase:ident];
    ) => {
        $crate::machine::transitions!(@enum $machine; $(#[$meta])* $vis $name {
            $($(#[$doc])* $variant $(=> $label)?),+
        });
        $crate::machine::transitions!(@allowed_from $name, $phase, $(#[$from_doc])* $from_vis fn {
            $($variant [$($from),*]),+
        });
        impl $name {
            $(#[$to_doc])*
            $to_vis fn leads_to(self) -> &'static [$to_phase] {
                match self {
                    $($name::$variant => &[$($to_phase::$to),*],)+
                }
            }
        }
    };
    (@enum $machine:literal; $(#[$meta:meta])* $vis:vis $name:ident {
        $($(#[$doc:meta])* $variant:ident $(=> $label:literal)?),+
    }) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$doc])* $variant,)+
        }

        impl $crate::machine::Transition for $name {
            const MACHINE: &'static str = $machine;
            const ALL: &'static [$name] = &[$($name::$variant),+];

            fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $crate::machine::transitions!(@name $variant $($label)?),)+
                }
            }
        }
    };
    (@allowed_from $name:ident, $phase:ident, $(#[$from_doc:meta])* $from_vis:vis fn {
        $($variant:ident [$($from:ident),*]),+
    }) => {
        impl $name {
            $(#[$from_doc])*
            $from_vis fn allowed_from(self) -> &'static [$phase] {
                match self {
                    $($name::$variant => &[$($phase::$from),*],)+
                }
            }

            /// Refuses this transition unless [`Self::allowed_from`] lists `phase`.
            $from_vis fn check_from(self, phase: $phase) -> Result<(), $crate::machine::IllegalTransition<$name>> {
                if self.allowed_from().contains(&phase) {
                    return Ok(());
                }
                let state = $crate::machine::Phase::name(phase);
                Err($crate::machine::IllegalTransition { transition: self, state })
            }
        }
    };
    (@name $variant:ident) => { stringify!($variant) };
    (@name $variant:ident $label:literal) => { $label };
}
pub(crate) use transitions;

/// Declares one machine's phases: the enum with its doc comments and derive, and its [`Phase`]
/// impl (`ALL` in declaration order, `name()`). A phase's name is its variant's unless a string
/// follows `=>`. [`transitions!`] shows one.
macro_rules! phases {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$doc:meta])* $variant:ident $(=> $label:literal)?),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$doc])* $variant,)+
        }

        impl $crate::machine::Phase for $name {
            const ALL: &'static [$name] = &[$($name::$variant),+];

            fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $crate::machine::transitions!(@name $variant $($label)?),)+
                }
            }
        }
    };
}
pub(crate) use phases;

#[cfg(test)]
mod tests {
    use super::*;

    phases! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum DoorPhase {
            Ajar => "AJAR",
            Shut,
            Locked => "LOCKED",
        }
    }

    transitions! {
        machine "door";
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Door {
            Open from [Shut],
            Close => "door_shut" from [Ajar],
        }
        fn allowed_from(self) -> &'static [DoorPhase];
    }

    transitions! {
        machine "lock";
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Key {
            Turn => "key_turned" from [Shut] to [Locked],
            Unturn from [Locked] to [Shut],
            Melt from [Ajar, Shut, Locked] to [],
        }
        fn allowed_from(self) -> &'static [DoorPhase];
        fn leads_to(self) -> &'static [DoorPhase];
    }

    transitions! {
        machine "bell";
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Bell {
            Ring,
            Silence => "bell_silenced",
        }
    }

    #[test]
    fn a_declared_machine_lists_its_steps_in_order_by_their_names() {
        assert_eq!((Door::MACHINE, Door::ALL), ("door", &[Door::Open, Door::Close][..]));
        assert_eq!(Door::ALL.iter().map(|door| door.name()).collect::<Vec<_>>(), ["Open", "door_shut"]);
        assert_eq!(Door::Close.index(), 1);
        assert_eq!((Bell::MACHINE, Bell::ALL), ("bell", &[Bell::Ring, Bell::Silence][..]));
        assert_eq!(Bell::ALL.iter().map(|bell| bell.name()).collect::<Vec<_>>(), ["Ring", "bell_silenced"]);
        assert_eq!(DoorPhase::ALL, [DoorPhase::Ajar, DoorPhase::Shut, DoorPhase::Locked]);
        assert_eq!(DoorPhase::ALL.iter().map(|phase| phase.name()).collect::<Vec<_>>(), ["AJAR", "Shut", "LOCKED"]);
    }

    #[test]
    fn a_declared_table_allows_a_step_only_from_the_phases_it_lists() {
        assert_eq!(Door::Open.allowed_from(), [DoorPhase::Shut]);
        assert_eq!(Door::Close.allowed_from(), [DoorPhase::Ajar]);
        assert_eq!(Door::Open.check_from(DoorPhase::Shut), Ok(()));
        assert_eq!(
            Door::Open.check_from(DoorPhase::Ajar),
            Err(IllegalTransition { transition: Door::Open, state: "AJAR" })
        );
        assert_eq!(
            Door::Close.check_from(DoorPhase::Locked).map_err(|illegal| illegal.to_string()),
            Err("transition door_shut is not allowed while the door is LOCKED".to_owned())
        );
        assert_eq!(Key::Turn.allowed_from(), [DoorPhase::Shut]);
        assert_eq!(Key::Turn.leads_to(), [DoorPhase::Locked]);
        assert_eq!(Key::Unturn.leads_to(), [DoorPhase::Shut]);
        assert_eq!(Key::Melt.allowed_from(), DoorPhase::ALL);
        assert_eq!(Key::Melt.leads_to(), []);
        assert_eq!(Key::Melt.check_from(DoorPhase::Ajar), Ok(()));
        assert_eq!(
            Key::Unturn.check_from(DoorPhase::Shut),
            Err(IllegalTransition { transition: Key::Unturn, state: "Shut" })
        );
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
