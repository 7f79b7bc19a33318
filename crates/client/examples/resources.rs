//! Requests and limits: the SUNK scheduler turns the requests into the placeholder job's CPUs and
//! memory, and refuses a Pod without them.

use cwsandbox_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let client = Client::from_env()?;
    let sandbox = client.sandbox().cks().runner_ids([runner]).requests("2", "4Gi").limits("2", "4Gi").run().await?;
    let spec = sandbox.proto().spec.clone().unwrap_or_default();
    let requirements = spec.containers[0].resource_requirements.clone().unwrap_or_default();
    println!("sandbox {} running with requests {:?}", sandbox.id(), requirements.requests);
    let result = sandbox.exec_check(&["nproc"]).await;
    sandbox.delete().await?;
    println!("nproc: {}", result?.stdout_text().trim());
    Ok(())
}
