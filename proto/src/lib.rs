//! Switchboard's protobuf packages, generated at build time without `protoc`.
#![forbid(unsafe_code)]

/// `switchboard.router.v1`: the router service and the sandbox pipe protocol.
pub mod router {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("switchboard.router.v1");
    }
}

/// `switchboard.control.v1`: the control plane's API (webhooks, rules, todos, identity).
pub mod control {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("switchboard.control.v1");
    }
}

/// Encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/switchboard_descriptor.bin"));
