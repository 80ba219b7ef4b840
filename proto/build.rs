//! Compiles the .proto files with protox (pure Rust, no protoc needed on the machine) and writes
//! the file descriptor set beside the generated code, for gRPC reflection.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "toolgate/v1/toolgate.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("toolgate_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
