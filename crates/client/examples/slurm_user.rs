//! Run a sandbox as the Slurm user of the surrounding job: `sunk.coreweave.com/user-id` from
//! `SLURM_JOB_UID`, as the guide does inside an `srun`/`sbatch` step.

use cwsandbox_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let uid = std::env::var("SLURM_JOB_UID").map_err(|_| "SLURM_JOB_UID is not set (run inside a Slurm job)")?;
    let client = Client::from_env()?;
    let sandbox =
        client.sandbox().cks().runner_ids([runner]).annotation("sunk.coreweave.com/user-id", &uid).run().await?;
    println!("sandbox {} running for uid {uid}", sandbox.id());
    let result = sandbox.exec_check(&["hostname"]).await;
    sandbox.delete().await?;
    println!("hostname: {}", result?.stdout_text().trim());
    Ok(())
}
