//! Place a sandbox in a given Slurm partition with the `sunk.coreweave.com/partition` annotation.

use cwsandbox_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let partition = std::env::var("PARTITION").unwrap_or_else(|_| "sandboxes".to_owned());
    let client = Client::from_env()?;
    let sandbox = client
        .sandbox()
        .cks()
        .runner_ids([runner])
        .annotation("sunk.coreweave.com/partition", &partition)
        .run()
        .await?;
    println!("sandbox {} running in partition {partition}", sandbox.id());
    let result = sandbox.exec_check(&["hostname"]).await;
    sandbox.delete().await?;
    println!("hostname: {}", result?.stdout_text().trim());
    Ok(())
}
