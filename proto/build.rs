//! Compiles `ptyhub/**/*.proto` with protox (pure Rust, no `protoc`), generates the tonic code,
//! and writes the encoded file descriptor set for server reflection.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "ptyhub/broker/v1/broker.proto",
    "ptyhub/session/v1/session.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let file_descriptors = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("ptyhub_descriptor.bin"),
        file_descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Every generated client and server starts its calls' buffers small (src/codec.rs).
        .codec_path("crate::codec::ProstCodec")
        // Terminal bytes travel as `bytes::Bytes` so a chunk is shared, never copied, on its way
        // from the ring to every attached client.
        .bytes(".ptyhub.broker.v1.Output.data")
        .bytes(".ptyhub.broker.v1.Input.data")
        .bytes(".ptyhub.broker.v1.InputItem.data")
        .bytes(".ptyhub.broker.v1.ScreenSnapshot.data")
        .bytes(".ptyhub.broker.v1.CommandOutput.data")
        .bytes(".ptyhub.broker.v1.RunResponse.output")
        .compile_fds(file_descriptors)?;
    Ok(())
}
