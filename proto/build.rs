//! Compiles the `.proto` contracts with `protox` (pure Rust), so building
//! cohort never needs a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/cohort/v1/coordinator.proto", "proto/cohort/v1/judge.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
