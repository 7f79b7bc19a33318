//! Generates the Rust side of `proto/` into OUT_DIR: prost messages, pbjson proto3-JSON impls,
//! tonic and Connect servers/clients (as the enabled features ask), and the descriptor set that
//! gRPC reflection serves. Uses the protoc shipped by `protoc-bin-vendored`, so no system protoc
//! or buf is needed.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROTO_ROOT: &str = "proto";
const API_DIR: &str = "proto/coreweave";
/// Well-known types whose proto3 JSON `pbjson-types` does not get right; see `src/wkt.rs`. The
/// other `google.protobuf` types map to `pbjson-types` (connectrpc-axum-build's default).
const OWN_WELL_KNOWN_TYPES: &[(&str, &str)] =
    &[(".google.protobuf.Timestamp", "crate::wkt::Timestamp"), (".google.protobuf.FieldMask", "crate::wkt::FieldMask")];
const DESCRIPTOR_FILE: &str = "cwsandbox_descriptor_set.bin";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    println!("cargo:rerun-if-changed=build.rs");

    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known_includes = protoc_bin_vendored::include_path()?;
    // prost-build and tonic-prost-build find protoc through this variable only. Build scripts run
    // on a single thread, so nothing reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", &protoc) };

    let mut files = Vec::new();
    collect_protos(Path::new(API_DIR), &mut files)?;
    files.sort();
    let includes = vec![PathBuf::from(PROTO_ROOT), well_known_includes.clone()];

    write_descriptor_set(&protoc, &files, &includes)?;
    generate_code(&files, &includes)?;
    Ok(())
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

/// The descriptor set with imports and source info, so reflection clients see comments too.
fn write_descriptor_set(
    protoc: &Path,
    files: &[PathBuf],
    includes: &[PathBuf],
) -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join(DESCRIPTOR_FILE);
    let mut command = Command::new(protoc);
    command
        .arg("--include_imports")
        .arg("--include_source_info")
        .arg(format!("--descriptor_set_out={}", out.display()));
    for include in includes {
        command.arg(format!("-I{}", include.display()));
    }
    command.args(files);
    let output = command.output()?;
    if !output.status.success() {
        return Err(format!("protoc failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(())
}

fn generate_code(files: &[PathBuf], includes: &[PathBuf]) -> std::io::Result<()> {
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    let client = std::env::var_os("CARGO_FEATURE_CLIENT").is_some();
    let builder = connectrpc_axum_build::compile_protos(files, includes)
        .include_file("cwsandbox_api.rs")
        .with_prost_config(|config| {
            for (proto, rust) in OWN_WELL_KNOWN_TYPES {
                config.extern_path(*proto, *rust);
            }
        })
        .with_pbjson_config(|builder| {
            for (proto, rust) in OWN_WELL_KNOWN_TYPES {
                builder.extern_path(*proto, *rust);
            }
        });
    // Each combination is a different builder type, hence four arms.
    match (server, client) {
        (true, true) => builder
            .with_tonic()
            .with_tonic_prost_config(server_codec)
            .with_tonic_client()
            .with_connect_client()
            .compile(),
        (true, false) => builder.with_tonic().with_tonic_prost_config(server_codec).compile(),
        (false, true) => builder.no_connect_server().with_tonic_client().with_connect_client().compile(),
        (false, false) => builder.no_connect_server().compile(),
    }
}

/// The generated gRPC servers decode with `codec::ServerCodec` (INVALID_ARGUMENT for a request
/// that is not valid protobuf, like Connect); see `src/codec.rs`.
fn server_codec(builder: tonic_prost_build::Builder) -> tonic_prost_build::Builder {
    builder.codec_path("crate::codec::ServerCodec")
}
