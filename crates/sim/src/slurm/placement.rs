//! Placement: which node a pending job fits on (resources, sharing rules, a per-partition
//! free-CPU index), allocation and freeing, and the scheduling pass.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;
use crate::time::SimTime;

impl Slurm {
    pub(super) fn rebuild_index(&mut self) {
        self.free_index.clear();
        for index in 0..self.nodes.len() {
            self.index_insert(index);
        }
    }

    pub(super) fn index_insert(&mut self, index: usize) {
        let node = &self.nodes[index];
        if node.drain.is_some() {
            return;
        }
        let key = (node.free_cpus(), index);
        for partition in &node.partitions {
            match self.free_index.get_mut(partition) {
                Some(set) => {
                    set.insert(key);
                }
                None => {
                    self.free_index.insert(partition.clone(), BTreeSet::from([key]));
                }
            }
        }
    }

    pub(super) fn index_remove(&mut self, index: usize) {
        let node = &self.nodes[index];
        let key = (node.free_cpus(), index);
        for partition in &node.partitions {
            if let Some(set) = self.free_index.get_mut(partition) {
                set.remove(&key);
            }
        }
    }

    /// Whether a job holds its node alone (`--exclusive` or an OverSubscribe=EXCLUSIVE partition).
    pub(super) fn holds_exclusively(&self, job: &Job) -> bool {
        job.sharing == Sharing::Exclusive
            || self.partitions.get(&*job.partition).is_some_and(|partition| partition.over_subscribe == "EXCLUSIVE")
    }

    /// [`Self::sharing_allows`] for node `index` as it stands, answered from its counts when they
    /// settle it (the common case: nobody on the node is exclusive or user-only).
    pub(super) fn sharing_allows_at(&self, index: usize, job: &Job, partition: &Partition) -> bool {
        let node = &self.nodes[index];
        if node.jobs.is_empty() {
            return true;
        }
        if job.sharing == Sharing::Exclusive || partition.over_subscribe == "EXCLUSIVE" {
            return false;
        }
        let counts = self.sharing[index];
        if counts.exclusive > 0 {
            return false;
        }
        if job.sharing != Sharing::User && counts.user == 0 {
            return true;
        }
        self.sharing_allows(node, job, partition)
    }

    pub(super) fn sharing_allows(&self, node: &SlurmNode, job: &Job, partition: &Partition) -> bool {
        let job_exclusive = job.sharing == Sharing::Exclusive || partition.over_subscribe == "EXCLUSIVE";
        if job_exclusive && !node.jobs.is_empty() {
            return false;
        }
        node.jobs.iter().filter_map(|other| self.job(*other)).all(|other| {
            let other_exclusive = other.sharing == Sharing::Exclusive
                || self.partitions.get(&*other.partition).is_some_and(|p| p.over_subscribe == "EXCLUSIVE");
            if other_exclusive {
                return false;
            }
            let user_rule = other.sharing == Sharing::User || job.sharing == Sharing::User;
            !user_rule || other.uid == job.uid
        })
    }

    pub(super) fn fits(&self, node: &SlurmNode, job: &Job) -> bool {
        node.free_cpus() >= job.req_cpus
            && node.real_memory_mb.saturating_sub(node.alloc_mem_mb) >= job.req_mem_mb
            && node.gpus - node.gpus_in_use.count_ones().min(node.gpus) >= job.req_gpus
            && (job.req_gpus == 0 || !job.gres_type_required || node.gres_type == job.gres_type)
    }

    pub(super) fn find_node(&self, job: &Job) -> Option<usize> {
        let partition = self.partitions.get(&*job.partition)?;
        let candidates = self.free_index.get(&*job.partition)?;
        candidates.range((job.req_cpus, 0)..).map(|&(_, index)| index).find(|&index| {
            let node = &self.nodes[index];
            self.fits(node, job) && self.sharing_allows_at(index, job, partition)
        })
    }

    pub(super) fn allocate(&mut self, id: JobId, index: usize, now: SimTime) {
        // Only pending jobs are in the pending set that scheduling walks.
        if self.begin(id, JobTransition::Allocate).is_err() {
            return;
        }
        self.index_remove(index);
        let Some(job) = self.queue.get(&id) else { return };
        let (cpus, mem, gpus) = (job.req_cpus, job.req_mem_mb, job.req_gpus);
        let (exclusive, user_only) = (self.holds_exclusively(job), job.sharing == Sharing::User);
        self.sharing[index].exclusive += u32::from(exclusive);
        self.sharing[index].user += u32::from(user_only);
        let node = &mut self.nodes[index];
        node.alloc_cpus += cpus;
        node.alloc_mem_mb += mem;
        let mut indices = Vec::new();
        for gpu in 0..node.gpus.min(64) {
            if indices.len() as u32 == gpus {
                break;
            }
            if node.gpus_in_use & (1 << gpu) == 0 {
                node.gpus_in_use |= 1 << gpu;
                indices.push(gpu);
            }
        }
        node.jobs.push(id);
        let node_name = node.name.clone();
        self.index_insert(index);
        if let Some(job) = self.queue.get_mut(&id) {
            job.state = JobBaseState::Running;
            set_reason(&mut job.reason, if job.in_prolog { "Prolog" } else { "None" });
            job.start = Some(now);
            job.node = Some(node_name);
            job.alloc_cpus = cpus;
            job.gpu_indices = indices;
            job.waiting_for_preempted.clear();
        }
    }

    pub(super) fn free(&mut self, id: JobId, now: SimTime) {
        let Some(job) = self.queue.get(&id) else { return };
        let Some(index) = job.node.as_ref().and_then(|name| self.node_index.get(name)).copied() else { return };
        let (cpus, mem, gpu_indices) = (job.alloc_cpus, job.req_mem_mb, job.gpu_indices.clone());
        if self.nodes[index].jobs.contains(&id) {
            let (exclusive, user_only) = (self.holds_exclusively(job), job.sharing == Sharing::User);
            self.sharing[index].exclusive -= u32::from(exclusive);
            self.sharing[index].user -= u32::from(user_only);
        }
        self.index_remove(index);
        let node = &mut self.nodes[index];
        node.alloc_cpus = node.alloc_cpus.saturating_sub(cpus);
        node.alloc_mem_mb = node.alloc_mem_mb.saturating_sub(mem);
        for gpu in gpu_indices {
            node.gpus_in_use &= !(1u64 << gpu);
        }
        node.jobs.retain(|other| *other != id);
        if node.jobs.is_empty() {
            node.last_busy = now;
        }
        self.index_insert(index);
    }

    /// One scheduling pass at `now`: places what fits in priority order, preempts lower-tier
    /// jobs where a partition allows it, and sets the pending reasons.
    pub fn schedule(&mut self, now: SimTime) -> Vec<SlurmOutcome> {
        let mut outcomes = Vec::new();
        self.schedule_into(now, &mut outcomes);
        outcomes
    }

    /// [`Slurm::schedule`], appending the outcomes to a buffer the caller reuses (the world
    /// schedules after every command).
    pub fn schedule_into(&mut self, now: SimTime, outcomes: &mut Vec<SlurmOutcome>) {
        let mut blocked_partitions: BTreeSet<Arc<str>> = BTreeSet::new();
        // Walk the pending set in order without copying it: each step resumes after the last key
        // (placing a job removes its key, which the range then simply no longer holds).
        let mut last = None;
        while let Some(&key) = match last {
            None => self.pending.iter().next(),
            Some(after) => self.pending.range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)).next(),
        } {
            last = Some(key);
            let id = key.3;
            let Some(job) = self.queue.get(&id) else {
                self.pending.remove(&key);
                continue;
            };
            let partition = job.partition.clone();
            if let Some(index) = self.find_node(job) {
                self.pending.remove(&key);
                self.allocate(id, index, now);
                outcomes.push(SlurmOutcome::Allocated(id));
                continue;
            }
            let waiting = job.waiting_for_preempted.iter().any(|victim| self.queue.contains_key(victim));
            if !waiting {
                let victims = self.preemption_victims(id);
                if !victims.is_empty() {
                    for victim in &victims {
                        self.preempt(*victim, now);
                        outcomes.push(SlurmOutcome::Preempted(*victim));
                    }
                    if let Some(job) = self.queue.get_mut(&id) {
                        job.waiting_for_preempted = victims;
                    }
                }
            }
            let reason = if blocked_partitions.contains(&partition) { "Priority" } else { "Resources" };
            // Every pass visits every pending job; only a reason that changed changes its
            // sandbox's view.
            if let Some(job) = self.queue.get_mut(&id)
                && job.reason != reason
            {
                set_reason(&mut job.reason, reason);
                if let JobKind::Placeholder { pod_uid } = &job.kind {
                    self.touched_placeholders.note(pod_uid.clone());
                }
            }
            blocked_partitions.insert(partition);
        }
    }

    /// Drains a node with a reason, recording who (`uid`) and when: nothing new is placed
    /// there.
    pub fn drain(&mut self, name: &str, reason: &str, uid: u32, now: SimTime) {
        let Some(&index) = self.node_index.get(name) else { return };
        self.index_remove(index);
        self.nodes[index].drain = Some(NodeDrain { reason: reason.to_owned(), uid, at: now });
    }

    /// Resumes a drained node.
    pub fn resume(&mut self, name: &str) {
        let Some(&index) = self.node_index.get(name) else { return };
        self.nodes[index].drain = None;
        self.index_remove(index);
        self.index_insert(index);
    }

    /// Pending jobs in scheduling order.
    pub fn pending_jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.pending.iter().map(|key| key.3)
    }
}
