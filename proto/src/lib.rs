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
    /// ([`switchboard_model::Label`]); an outcome the router did not name, or a queue decision
    /// naming no queue, is a fault (as ingest records it), so every label reads back from its
    /// text.
    pub fn label(&self) -> switchboard_model::Label<'_> {
        use router::v1::Outcome;
        use switchboard_model::Label;
        match Outcome::try_from(self.outcome).unwrap_or(Outcome::Unspecified) {
            Outcome::Queue if !self.queue.is_empty() => Label::queue(&self.queue),
            Outcome::Drop => Label::Drop,
            Outcome::Quarantine => Label::Quarantine,
            Outcome::Default => Label::Default,
            Outcome::Queue | Outcome::Fault | Outcome::Unspecified => Label::Fault,
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

pub mod convert;

pub mod message_json;

pub mod reason;

pub mod refusal;

/// Encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/switchboard_descriptor.bin"));

/// Server reflection, v1 and v1alpha (grpcurl speaks v1; python's grpcio-reflection client
/// v1alpha), listing exactly the services a process serves: `services`, plus health and
/// reflection itself. Every descriptor set is registered, so any type a listed service uses
/// resolves.
pub mod reflection {
    use tonic_reflection::server::{Builder, Error, v1, v1alpha};

    /// `grpc.health.v1.Health`, served by every role.
    pub const HEALTH: &str = "grpc.health.v1.Health";
    /// The reflection services themselves.
    pub const REFLECTION: [&str; 2] = [
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ];

    fn builder<'a>(services: &[&str]) -> Builder<'a> {
        let mut b = Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(super::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            );
        for name in services.iter().copied().chain([HEALTH]).chain(REFLECTION) {
            b = b.with_service_name(name);
        }
        b
    }

    /// Both reflection services for a process serving `services`.
    #[allow(clippy::type_complexity)]
    pub fn services(
        services: &[&str],
    ) -> Result<
        (
            v1::ServerReflectionServer<impl v1::ServerReflection>,
            v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>,
        ),
        Error,
    > {
        Ok((
            builder(services).build_v1()?,
            builder(services).build_v1alpha()?,
        ))
    }
}
