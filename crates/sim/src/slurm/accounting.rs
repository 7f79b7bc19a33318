//! The accounting records `sacct` reads: a job stays on record after it leaves the queue, with
//! its base state only (never COMPLETING).

use super::*;

impl Slurm {
    /// A job's latest state: the queue entry if queued, else its accounting row.
    pub fn job_or_record(&self, id: JobId) -> Option<&Job> {
        self.queue.get(&id).or_else(|| self.finished.get(&id)).map(|job| &**job)
    }

    /// The accounting row of a job, as `sacct` reads it: the base state only, never COMPLETING.
    pub fn accounting_record(&self, id: JobId) -> Option<Job> {
        self.job_or_record(id).map(|job| Job { completing: false, ..job.clone() })
    }

    /// Every job on record, queued or finished, borrowed and in no particular order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.finished.values().chain(self.queue.values()).map(|job| &**job)
    }

    /// Every accounting row, by job id.
    pub fn accounting_records(&self) -> Vec<Job> {
        let mut ids: Vec<JobId> = self.finished.keys().chain(self.queue.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().filter_map(|id| self.accounting_record(id)).collect()
    }

    /// Every job on record, queued or finished, by id, borrowed (a queued job's COMPLETING
    /// flag is as the queue has it).
    pub fn jobs_on_record(&self) -> impl Iterator<Item = &Job> {
        let mut jobs: Vec<&Job> = self.queue.values().chain(self.finished.values()).map(|job| &**job).collect();
        jobs.sort_unstable_by_key(|job| job.id);
        jobs.into_iter()
    }

    /// How many jobs were ever submitted and are still on record.
    pub fn accounted_jobs(&self) -> usize {
        self.finished.len() + self.queue.len()
    }

    pub(super) fn retire(&mut self, id: JobId) {
        if let Some(mut job) = self.queue.remove(&id) {
            job.completing = false;
            self.finished.insert(id, job);
        }
    }
}
