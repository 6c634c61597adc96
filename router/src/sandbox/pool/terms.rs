//! What a call needs to know of a configuration besides evaluating it (its rules' ids and
//! its digest), kept by each pool by the configuration's message bytes: reading and hashing a
//! configuration cost the router more than a one-delivery call's own work, and ingest sends
//! the same saved configuration call after call. A cache of its own, so its policy (how
//! many, when it starts over, a seeded hash) reads in one place.

use std::sync::Arc;

use prost::Message;
use switchboard_proto::router::v1::Configuration;

use super::{Inner, lock};
use crate::engine::compile::rule_id;
use crate::engine::validate::read_configuration;

/// What a call needs to know of one of its configurations besides evaluating it. Parsing
/// and hashing a 32-rule configuration cost the router more than a one-delivery call's own
/// work, and ingest sends the same saved configuration call after call, so each pool keeps
/// them by the configuration's message bytes ([`Inner::terms_of`]).
#[derive(Debug, Default)]
pub(super) struct Terms {
    /// Per rule, the id a fault names (`#<index>` for a rule without one).
    pub(super) rule_ids: Vec<String>,
    /// Per rule, the id its counters carry (empty for a rule without one).
    pub(super) counted_ids: Vec<String>,
    /// Empty for a configuration that does not parse (its units all fault anyway).
    pub(super) digest: String,
}

impl Terms {
    fn of(configuration: &Configuration) -> Self {
        match read_configuration(configuration) {
            Ok(cfg) => Terms {
                rule_ids: cfg
                    .rules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| rule_id(r, i))
                    .collect(),
                counted_ids: cfg
                    .rules
                    .iter()
                    .map(|r| r.id.clone().unwrap_or_default())
                    .collect(),
                digest: cfg.digest(),
            },
            Err(_) => Terms::default(),
        }
    }
}

/// Configurations' [`Terms`] kept by a pool, at most this many (then it starts over): a
/// router serves the saved configurations of the webhooks receiving deliveries now.
const TERMS_KEPT: usize = 256;

impl Inner {
    /// interactive work or replays, interactive work while lanes run replays.
    /// The [`Terms`] of `configuration`, read once while kept.
    pub(super) fn terms_of(&self, configuration: &Configuration) -> Arc<Terms> {
        let key = configuration.encode_to_vec();
        if let Some(terms) = lock(&self.terms).get(&key) {
            return terms.clone();
        }
        // Read outside the lock: a big configuration does not hold up other calls.
        let terms = Arc::new(Terms::of(configuration));
        let mut kept = lock(&self.terms);
        if kept.len() >= TERMS_KEPT {
            kept.clear();
        }
        kept.insert(key, terms.clone());
        terms
    }
}
