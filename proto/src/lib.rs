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

impl router::v1::Decision {
    /// What plans count, totals group and events record this decision as
    /// ([`switchboard_model::Label`]); an outcome the router did not name is a fault.
    pub fn label(&self) -> switchboard_model::Label<'_> {
        use router::v1::Outcome;
        use switchboard_model::Label;
        match Outcome::try_from(self.outcome).unwrap_or(Outcome::Unspecified) {
            Outcome::Queue => Label::Queue(&self.queue),
            Outcome::Drop => Label::Drop,
            Outcome::Quarantine => Label::Quarantine,
            Outcome::Default => Label::Default,
            Outcome::Fault | Outcome::Unspecified => Label::Fault,
        }
    }
}

impl From<&switchboard_model::TrustedActors> for router::v1::TrustedActors {
    fn from(t: &switchboard_model::TrustedActors) -> Self {
        router::v1::TrustedActors {
            humans: t.humans.clone(),
            agents: t.agents.clone(),
            bots: t.bots.clone(),
        }
    }
}

impl From<&switchboard_model::TrustedActors> for control::v1::TrustedActors {
    fn from(t: &switchboard_model::TrustedActors) -> Self {
        control::v1::TrustedActors {
            humans: t.humans.clone(),
            agents: t.agents.clone(),
            bots: t.bots.clone(),
        }
    }
}

/// Encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/switchboard_descriptor.bin"));
