//! What this instance can do: the operator switches every layer reads, below all of them (a
//! file of its own, so the layers that route — ingest, redrive, trials — import it without
//! importing the state that holds them).

/// What this instance can do (BASE.md: capabilities are operator switches).
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// SPEC-0026: `.actor`, first-class trusted_actors, quarantine, fail-closed faults.
    pub trusted_actors: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            trusted_actors: true,
        }
    }
}
