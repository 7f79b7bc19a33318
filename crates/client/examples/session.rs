//! A session with shared defaults and two sandboxes; closing the session stops both.

use cwsandbox_client::{Client, SandboxDefaults, Session, pb};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runner = std::env::var("CWSANDBOX_RUNNER_ID").unwrap_or_else(|_| "cks-runner".to_owned());
    let defaults = SandboxDefaults {
        mode: Some(pb::SandboxMode::Cks),
        runner_ids: vec![runner],
        tags: vec!["example-session".to_owned()],
        ..Default::default()
    };
    let session = Session::new(Client::from_env()?, defaults);
    let first = session.run().await?;
    let second = session.run().await?;
    let listed = session.list().await?;
    println!("session sandboxes: {}", listed.len());
    assert!(listed.iter().any(|s| s.sandbox_id == first.id()));
    assert!(listed.iter().any(|s| s.sandbox_id == second.id()));
    let outputs = (first.exec_check(&["hostname"]).await, second.exec_check(&["hostname"]).await);
    let stopped = session.close().await?;
    println!("stopped {stopped}");
    let (a, b) = (outputs.0?, outputs.1?);
    println!("hostnames: {} {}", a.stdout_text().trim(), b.stdout_text().trim());
    Ok(())
}
