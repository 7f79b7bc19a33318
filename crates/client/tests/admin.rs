//! The emulator's admin API through the SDK, against a real emulator (testkit harness, port 0).

use cwsandbox_client::{Client, Code, Config};
use cwsandbox_testkit::emulator::{EmulatorProcess, built_emulator_binary};

#[tokio::test(flavor = "current_thread")]
async fn reset_organization_resets_only_the_one_named() {
    let binary = built_emulator_binary().expect("the emulator binary builds");
    let emu = EmulatorProcess::start(&binary, &[]).expect("emulator starts");
    let client = Client::new(Config::new(&emu.ready.base_url, &emu.ready.admin_token)).unwrap();
    let sandbox = client.sandbox().cks().runner_ids([emu.ready.runner_id.clone()]).run().await.expect("runs");
    let admin = client.emulator().unwrap();

    assert_eq!(admin.reset_organization("some-other-org").await.unwrap(), 0, "another organization: nothing of ours");
    assert!(client.get(sandbox.id()).await.is_ok(), "still there");
    assert_eq!(admin.reset_organization(&emu.ready.org).await.unwrap(), 1, "our running sandbox's Pod");
    let Err(error) = client.get(sandbox.id()).await else { panic!("the reset forgets the sandbox") };
    assert_eq!(error.code(), Code::NotFound, "{error}");
    emu.stop().expect("stops with nothing left running");
}
