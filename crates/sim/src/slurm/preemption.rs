//! Partition-tier preemption: which running jobs make room for a higher tier, and what
//! preempting does (CANCEL or REQUEUE).

use super::*;
use crate::time::SimTime;

impl Slurm {
    /// Jobs on one node whose preemption would make room for `id`, or none.
    pub(super) fn preemption_victims(&self, id: JobId) -> Vec<JobId> {
        let Some(job) = self.queue.get(&id) else { return Vec::new() };
        let Some(partition) = self.partitions.get(&*job.partition) else { return Vec::new() };
        for name in &partition.nodes {
            let Some(node) = self.node(name) else { continue };
            if node.drain.is_some() {
                continue;
            }
            let preemptable: Vec<&Job> = node
                .jobs
                .iter()
                .filter_map(|other| self.job(*other))
                .filter(|other| {
                    !other.completing
                        && other.state == JobBaseState::Running
                        && self.partitions.get(&*other.partition).is_some_and(|their| {
                            their.priority_tier < partition.priority_tier && their.preempt_mode != PreemptMode::Off
                        })
                })
                .collect();
            if preemptable.is_empty() {
                continue;
            }
            let mut trial = node.clone();
            for other in &preemptable {
                trial.alloc_cpus -= other.alloc_cpus;
                trial.alloc_mem_mb -= other.req_mem_mb;
                for gpu in &other.gpu_indices {
                    trial.gpus_in_use &= !(1u64 << gpu);
                }
                trial.jobs.retain(|candidate| *candidate != other.id);
            }
            if self.fits(&trial, job) && self.sharing_allows(&trial, job, partition) {
                return preemptable.iter().map(|other| other.id).collect();
            }
        }
        Vec::new()
    }

    pub(super) fn preempt(&mut self, id: JobId, now: SimTime) {
        let mode = self
            .queue
            .get(&id)
            .and_then(|job| self.partitions.get(&*job.partition))
            .map_or(PreemptMode::Cancel, |partition| partition.preempt_mode);
        let transition = if mode == PreemptMode::Requeue { JobTransition::Requeue } else { JobTransition::Preempt };
        // Victims are chosen among allocated jobs that are not completing.
        if self.begin(id, transition).is_err() {
            return;
        }
        if let Some(job) = self.queue.get_mut(&id) {
            job.state = if mode == PreemptMode::Requeue { JobBaseState::Requeued } else { JobBaseState::Preempted };
            job.completing = true;
            job.end = Some(now);
            job.exit_code = (0, 15);
        }
    }
}
