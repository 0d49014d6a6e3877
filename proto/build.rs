//! Generates the protobuf types and the gRPC services from `picket/v1/` (and `google/rpc/`) with a pure-Rust protobuf
//! compiler (`protox`): no system `protoc` is needed. `madsim-tonic-build` writes two versions of
//! the code (real tonic into `OUT_DIR`, simulated into `OUT_DIR/sim`); `tonic::include_proto!`
//! picks the right one under `cfg(madsim)`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "picket/v1/common.proto",
    "picket/v1/command.proto",
    "picket/v1/durable.proto",
    "picket/v1/lock.proto",
    "picket/v1/admin.proto",
    "picket/v1/peer.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let includes = ["."];
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join("picket_descriptor.bin");

    let descriptors = protox::compile(PROTOS, includes)?;
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&descriptors),
    )?;

    let mut config = prost_build::Config::new();
    // `google.rpc.Status` (the `Session` stream's errors) is the standard one tonic-types has.
    config.extern_path(".google.rpc", "::tonic_types::pb");
    tonic_build::configure()
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run()
        .compile_protos_with_config(config, PROTOS, &includes)?;
    println!("cargo:rerun-if-changed=picket");
    println!("cargo:rerun-if-changed=google");
    Ok(())
}
