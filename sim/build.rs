//! Generates the fenced resource's gRPC service from `proto/` with `protox` (no system `protoc`),
//! the same way `proto/build.rs` does; `tonic::include_proto!` picks the simulated code under
//! `cfg(madsim)`.

use std::path::PathBuf;

const PROTOS: &[&str] = &["proto/picket/sim/v1/resource.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let includes = ["proto"];
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join("picket_sim_descriptor.bin");
    let descriptors = protox::compile(PROTOS, includes)?;
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_build::configure()
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run()
        .compile_protos_with_config(prost_build::Config::new(), PROTOS, &includes)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
