//! The guide's first step: start a sandbox on the managed runner and run `hostname` in it.
//! `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` and `CWSANDBOX_RUNNER_ID` configure it.

use cwsandbox_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let client = Client::from_env()?;
    let sandbox = client.sandbox().cks().runner_ids([runner]).run().await?;
    println!("sandbox {} is running", sandbox.id());
    let result = sandbox.exec_check(&["hostname"]).await;
    sandbox.delete().await?;
    println!("hostname: {}", result?.stdout_text().trim());
    Ok(())
}
