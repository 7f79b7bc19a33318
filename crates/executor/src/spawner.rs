//! One long-lived thread that forks every process the executor starts.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, not the
//! process. If children were forked from tokio's blocking-pool threads, which end
//! after a while idle, sandboxes would be killed at random. Forking from a thread
//! that lives exactly as long as the executor ties every sandbox to the executor
//! (and so to the emulator process).

use std::sync::mpsc;
use std::thread;

use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    pub(crate) fn new() -> std::io::Result<Spawner> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        thread::Builder::new().name("cwsandbox-spawner".into()).spawn(move || {
            // Ends when the executor (the only sender) is dropped; the death signals
            // of the sandboxes' keepers then fire.
            while let Ok(job) = receiver.recv() {
                job();
            }
        })?;
        Ok(Spawner { jobs })
    }

    /// Spawns `command` on the spawner thread, registering the child with the
    /// caller's tokio runtime.
    pub(crate) async fn spawn(&self, mut command: Command) -> std::io::Result<Child> {
        let handle = Handle::current();
        let (sender, receiver) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _runtime = handle.enter();
            let _ = sender.send(command.spawn());
        });
        self.jobs.send(job).map_err(|_| std::io::Error::other("the executor's spawner thread is gone"))?;
        receiver.await.map_err(|_| std::io::Error::other("the executor's spawner thread is gone"))?
    }
}
