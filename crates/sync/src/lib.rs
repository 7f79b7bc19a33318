//! Taking a `std::sync` lock whose holder panicked.
//!
//! A `Mutex` or `RwLock` is *poisoned* when a thread panics while holding it: std assumes the
//! panic may have left the data half-changed and makes every later `lock()` return an error. The
//! locks of this workspace recover the data instead, for two reasons:
//!
//! - What they guard cannot be left half-changed: each change under the lock is one step a panic
//!   cannot split (a map insert or remove, a counter, a flag, a value replaced), or, for the
//!   simulated world, a command that either finishes or changes nothing. The data after the panic
//!   is data some earlier step left, and it is still right.
//! - The emulator outlives a panic: it ends only the task it happened in (tokio catches it), and
//!   the server goes on answering. Failing on poison would turn that one panicked request into
//!   every later request that takes the same lock failing, until a restart: the panic's effect
//!   would grow from one answer to all of them.
//!
//! So every `std::sync` lock in the workspace is taken with [`MutexUnpoisoned::lock_unpoisoned`],
//! [`RwLockUnpoisoned::read_unpoisoned`]/[`RwLockUnpoisoned::write_unpoisoned`], or waited on with
//! [`CondvarUnpoisoned::wait_unpoisoned`]. Where why a lock's state survives a panic is not plain
//! from what it holds, say so beside the lock.
//!
//! Do not use these where a holder changes the data in several steps that must all happen
//! together (two fields that must agree, a list and its count): there the poison tells the truth.
//! Make the change one step (compute first, then assign under the lock), or treat the poison as the
//! error it is. `tokio::sync` locks are not poisoned and need none of this.
//!
//! The lock stays marked poisoned after a recovery (`is_poisoned()` is still true); a plain
//! `lock()` elsewhere would still fail, which is one more reason to take every lock through here.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex`] access that recovers a poisoned lock (see the crate's documentation for when that is
/// right).
pub trait MutexUnpoisoned<T: ?Sized> {
    /// Locks, taking the data as it is even if a holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;

    /// The data through a unique reference (no locking needed), even if a holder panicked.
    fn get_mut_unpoisoned(&mut self) -> &mut T;
}

impl<T: ?Sized> MutexUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_mut_unpoisoned(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock`] access that recovers a poisoned lock (see the crate's documentation for when that
/// is right).
pub trait RwLockUnpoisoned<T: ?Sized> {
    /// Locks for reading, taking the data as it is even if a writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;

    /// Locks for writing, taking the data as it is even if a writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockUnpoisoned<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Condvar`] waiting that recovers a mutex poisoned while this thread waited.
pub trait CondvarUnpoisoned {
    /// Waits for a notification, then takes the data as it is even if a holder panicked meanwhile.
    fn wait_unpoisoned<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
}

impl CondvarUnpoisoned for Condvar {
    fn wait_unpoisoned<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex, RwLock};
    use std::thread;

    use super::*;

    /// Runs `holder` on another thread and checks that it panicked (with a guard held, the lock
    /// is poisoned).
    fn run_panicking(holder: impl FnOnce() + Send + 'static) {
        assert!(thread::spawn(holder).join().is_err(), "the holder panicked");
    }

    #[test]
    fn a_poisoned_mutex_gives_its_data_and_stays_usable() {
        let counter = Arc::new(Mutex::new(1));
        let held = Arc::clone(&counter);
        run_panicking(move || {
            let mut counter = held.lock().unwrap();
            *counter += 1;
            panic!("a holder panics after its change");
        });
        assert!(counter.is_poisoned());
        assert!(counter.lock().is_err(), "a plain lock() fails");

        assert_eq!(*counter.lock_unpoisoned(), 2, "the change made before the panic is kept");
        *counter.lock_unpoisoned() += 1;
        assert_eq!(*counter.lock_unpoisoned(), 3);

        let mut counter = Arc::into_inner(counter).expect("the thread is gone");
        *counter.get_mut_unpoisoned() += 1;
        assert_eq!(*counter.get_mut_unpoisoned(), 4);
    }

    #[test]
    fn a_poisoned_rwlock_gives_its_data_to_readers_and_writers() {
        let names = Arc::new(RwLock::new(vec!["a"]));
        let held = Arc::clone(&names);
        run_panicking(move || {
            let mut names = held.write().unwrap();
            names.push("b");
            panic!("a writer panics after its change");
        });
        assert!(names.is_poisoned());
        assert!(names.read().is_err(), "a plain read() fails");

        assert_eq!(*names.read_unpoisoned(), ["a", "b"]);
        names.write_unpoisoned().push("c");
        assert_eq!(*names.read_unpoisoned(), ["a", "b", "c"]);
    }

    #[test]
    fn a_wait_returns_the_data_of_a_mutex_poisoned_meanwhile() {
        let shared = Arc::new((Mutex::new(false), Condvar::new()));
        let mut done = shared.0.lock_unpoisoned();
        let other = Arc::clone(&shared);
        let holder = thread::spawn(move || {
            let (flag, changed) = &*other;
            let mut done = flag.lock_unpoisoned();
            *done = true;
            changed.notify_all();
            panic!("a holder panics");
        });
        while !*done {
            done = shared.1.wait_unpoisoned(done);
        }
        drop(done);
        assert!(holder.join().is_err(), "the holder panicked");
        assert!(shared.0.is_poisoned());
        assert!(*shared.0.lock_unpoisoned());
    }
}
