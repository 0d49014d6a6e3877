//! Compiles proto/ (the same files picket-proto generates its types from) into a descriptor
//! set, so that the binding can hand any message to Python as proto3 JSON.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = PathBuf::from("../../proto");
    let files = ["picket/v1/lock.proto", "picket/v1/admin.proto"];
    let descriptors = protox::compile(files.map(|f| proto.join(f)), [&proto])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("picket_descriptor.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&descriptors))?;
    println!("cargo:rerun-if-changed=../../proto");
    Ok(())
}
