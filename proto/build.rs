//! Compiles the protobuf packages with protox (pure Rust): no system `protoc` on any machine.
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "switchboard/router/v1/router.proto",
        "switchboard/router/v1/sandbox.proto",
        "switchboard/control/v1/control.proto",
        "switchboard/control/v1/rule_packs.proto",
        "switchboard/control/v1/rule_trials.proto",
        "switchboard/control/v1/operators.proto",
        "switchboard/control/v1/errors.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // Kept for gRPC server reflection.
    std::fs::write(out.join("switchboard_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Delivery bodies are shared, not copied, when a batch is split and resent to children.
        .bytes(".")
        // `prost::Name` on every message: its full name finds its descriptor, so any message
        // prints as protobuf JSON (`message_json`).
        .compile_fds_with_config(fds, {
            let mut config = tonic_prost_build::Config::new();
            config.enable_type_names();
            // Type URLs as google.protobuf.Any writes them, so a refusal's details decode in
            // any client (`type.googleapis.com/switchboard.control.v1.RefusalDetails`).
            config.type_name_domain(["."], "type.googleapis.com");
            config
        })?;
    Ok(())
}
