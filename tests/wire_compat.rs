//! Our public `.proto` files against the descriptors the published `cwsandbox==1.22.0` ships:
//! every message, field, enum value, service, method and option, both ways, then byte for byte.

use std::io::Write;

#[test]
fn public_files_match_the_published_client_descriptors() -> anyhow::Result<()> {
    let python = cwsandbox_testkit::python_env()?;
    let mut ours = tempfile::NamedTempFile::new()?;
    ours.write_all(cwsandbox_api::FILE_DESCRIPTOR_SET)?;
    ours.flush()?;

    let output = python.run_script("compare_descriptors.py", &[ours.path()])?;
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    assert!(
        output.status.success(),
        "our descriptors differ from cwsandbox==1.22.0 (ours first):\n{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("compared elements of 7 public files match"), "{report}");
    Ok(())
}
