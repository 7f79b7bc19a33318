//! Timers: what is due when, and what each does when it fires.

use std::collections::{BTreeMap, VecDeque};

use crate::ids::SharedStr;
use crate::machine::legal;
use crate::slurm::{JobBaseState, JobId, JobKind, JobPhase};
use crate::time::{SimTime, TimerKey};
use crate::world::World;

/// What a timer does when it fires.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    PrologDone(JobId),
    EpilogDone(JobId),
    BatchJobEnds(JobId),
    TimeLimit(JobId),
    DrainBeforeKillWait(JobId),
    KillWait(JobId),
    PodGraceOver(SharedStr),
    SandboxLifetime(SharedStr),
    SandboxForget(SharedStr),
    HoldOver(SharedStr),
    ImagePullBackOff(SharedStr),
    OomKill(SharedStr),
    NodeNotReady(SharedStr),
    VolumeCheck(SharedStr),
}

type Bucket = VecDeque<(u64, Option<Timer>)>;

/// Pending timers by firing time, each time's in scheduling order (sequence number; `None` once
/// cancelled). Timers bunch at a few instants (every command at one instant schedules its
/// lifetimes, prologs and grace periods from the same `now`), so scheduling is a lookup among
/// few times and a push; cancelling a forgotten sandbox's lifetime timer is a binary search, and
/// it no longer waits, in memory, for its distant time.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    buckets: BTreeMap<SimTime, Bucket>,
    /// Emptied buckets kept for the next instants: a bucket holds a whole batch of timers, and
    /// freeing buffers that size makes the allocator sweep all its small free lists.
    spare_buckets: Vec<Bucket>,
    sequence: u64,
}

impl Timers {
    /// Schedules a timer; the key returned can cancel it.
    pub(crate) fn schedule(&mut self, at: SimTime, timer: Timer) -> TimerKey {
        self.sequence += 1;
        let entry = (self.sequence, Some(timer));
        match self.buckets.get_mut(&at) {
            Some(bucket) => bucket.push_back(entry),
            None => {
                let mut bucket = self.spare_buckets.pop().unwrap_or_default();
                bucket.push_back(entry);
                self.buckets.insert(at, bucket);
            }
        }
        TimerKey { at, sequence: self.sequence }
    }

    /// Drops a timer that can no longer do anything.
    pub(crate) fn cancel(&mut self, TimerKey { at, sequence }: TimerKey) {
        let Some(bucket) = self.buckets.get_mut(&at) else { return };
        if let Ok(index) = bucket.binary_search_by_key(&sequence, |(queued, _)| *queued) {
            bucket[index].1 = None;
        }
        drop_cancelled_front(bucket);
        if bucket.is_empty()
            && let Some(bucket) = self.buckets.remove(&at)
        {
            self.keep_spare(bucket);
        }
    }

    /// When the next live timer fires, if any.
    pub(crate) fn next_at(&self) -> Option<SimTime> {
        self.buckets.first_key_value().map(|(at, _)| *at)
    }

    /// Takes the next live timer due by `target`, in time and then scheduling order.
    pub(crate) fn pop_due(&mut self, target: SimTime) -> Option<(SimTime, Timer)> {
        let mut first = self.buckets.first_entry()?;
        let at = *first.key();
        if at > target {
            return None;
        }
        let bucket = first.get_mut();
        let popped = bucket.pop_front().and_then(|(_, timer)| timer);
        drop_cancelled_front(bucket);
        if bucket.is_empty() {
            let bucket = first.remove();
            self.keep_spare(bucket);
        }
        popped.map(|timer| (at, timer))
    }

    /// Keeps an emptied bucket for reuse: a few, of an ordinary batch's size (an exceptional
    /// burst's buffer is let go rather than held).
    fn keep_spare(&mut self, bucket: Bucket) {
        if self.spare_buckets.len() < 4 && bucket.capacity() <= 8192 {
            self.spare_buckets.push(bucket);
        }
    }
}

/// Drops cancelled timers from the front of a bucket, so the first bucket's time is always that
/// of a live timer.
fn drop_cancelled_front(bucket: &mut Bucket) {
    while bucket.front().is_some_and(|(_, timer)| timer.is_none()) {
        bucket.pop_front();
    }
}

impl World {
    /// What each timer does when it fires.
    pub(super) fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::PrologDone(job) => self.on_prolog_done(job),
            Timer::EpilogDone(job) => self.on_epilog_done(job),
            Timer::BatchJobEnds(job) => {
                // Unless it was cancelled, preempted or timed out first.
                let exit_code = match self.slurm.job(job).map(|job| &job.kind) {
                    Some(JobKind::Batch { exit_code, .. }) => i32::from(*exit_code),
                    _ => 0,
                };
                if self.slurm.job(job).is_some_and(|job| job.phase() == JobPhase::Running) {
                    let state = if exit_code == 0 { JobBaseState::Completed } else { JobBaseState::Failed };
                    legal(self.slurm.finish(job, state, (exit_code, 0), self.now));
                    self.on_job_ended(job);
                }
            }
            Timer::TimeLimit(job) => {
                if self.slurm.job(job).is_some_and(|job| matches!(job.phase(), JobPhase::Prolog | JobPhase::Running)) {
                    // As Slurm records it: the job line `0:0`, the batch step cancelled by SIGTERM.
                    legal(self.slurm.finish(job, JobBaseState::Timeout, (0, 0), self.now));
                    self.on_job_ended(job);
                }
            }
            Timer::DrainBeforeKillWait(job) => self.on_drain_before_kill_wait(job),
            Timer::KillWait(job) => self.on_kill_wait(job),
            Timer::PodGraceOver(uid) => {
                if self.cluster.pod(&uid).is_some_and(|pod| pod.deletion_timestamp.is_some()) {
                    self.remove_pod(&uid);
                }
            }
            Timer::SandboxLifetime(id) => self.sandbox_lifetime_over(&id),
            Timer::SandboxForget(id) => self.sandbox_forget(&id),
            Timer::HoldOver(uid) => self.on_hold_over(&uid),
            Timer::ImagePullBackOff(uid) => self.on_image_pull_back_off(&uid),
            Timer::OomKill(uid) => self.on_oom_kill(&uid),
            Timer::NodeNotReady(uid) => self.on_node_not_ready(&uid),
            Timer::VolumeCheck(uid) => self.on_volume_check(&uid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_time_then_scheduling_order_and_cancelled_ones_never() {
        let start = SimTime::from_millis(1_000_000);
        let later = start + std::time::Duration::from_secs(5);
        let mut timers = Timers::default();
        timers.schedule(later, Timer::KillWait(3));
        let cancelled = timers.schedule(start, Timer::KillWait(1));
        timers.schedule(start, Timer::KillWait(2));
        timers.cancel(cancelled);
        assert_eq!(timers.next_at(), Some(start));
        assert_eq!(timers.pop_due(start), Some((start, Timer::KillWait(2))));
        assert_eq!(timers.pop_due(start), None, "the timer at +5s is not due yet");
        assert_eq!(timers.next_at(), Some(later));
        assert_eq!(timers.pop_due(later), Some((later, Timer::KillWait(3))));
        assert_eq!(timers.next_at(), None);
    }
}
