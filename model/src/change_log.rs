//! The change log (issue 47): one record of every change to what routes where, or to who may
//! change it, kept as a hash chain. Each entry names its place (`seq`, from 1, no gaps) and the
//! SHA-256 of the entry before it (`prev_hash`; the first entry's is [`GENESIS`]); its own hash
//! is the SHA-256 of its canonical JSON (keys sorted at every level, the form
//! [`crate::write_canonical`] writes). So changing a byte of any entry, deleting one, or
//! swapping two is found by recomputing the chain, and [`verify`] names the first entry that
//! does not match. Pure: the store appends and reads, the CLI exports and verifies, and all of
//! them agree on what an entry's hash is because it is computed here only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What kind of change an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new configuration version: a plan confirmed or accepted, a hand-written save, a
    /// guard's revert.
    Configuration,
    /// A redrive applied (decisions re-recorded under the current configuration).
    Redrive,
    ConfirmPolicy,
    ApprovalRules,
    Grant,
    GrantAllowance,
    EndpointVend,
    EndpointRevoke,
    OperatorCredential,
    /// A webhook deleted, with its events, todos and plans (its entries stay).
    WebhookDelete,
    /// Any other operator act the audit records.
    Operator,
}

/// Who made the change: an endpoint and the human it acts for, or an operator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ChangeActor {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub human: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}

impl ChangeActor {
    /// Who made it, in the words every reader uses: `alice via ep_…`, `alice`, `ep_…`,
    /// `operator op_…`, or `an operator` (an operator's save, before acts named one).
    pub fn describe(&self) -> String {
        match (&self.human, &self.endpoint, &self.operator) {
            (Some(h), Some(e), _) => format!("{h} via {e}"),
            (Some(h), None, _) => h.clone(),
            (None, Some(e), _) => e.clone(),
            (None, None, Some(o)) => format!("operator {o}"),
            (None, None, None) => "an operator".to_string(),
        }
    }
}

/// One change, before it is sealed into the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChangeEntry {
    /// Its place in the log, from 1.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub kind: ChangeKind,
    pub actor: ChangeActor,
    /// The people whose approvals put it live, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<String>,
    /// The configuration version it saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// sha256 of the configuration before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_after: Option<String>,
    /// The plan that made it, and its evidence (replay, trial, guard), by digest or id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evidence: BTreeMap<String, String>,
    /// What else the change said (the operator audit's fields).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, String>,
    /// The hash of the entry before it ([`GENESIS`] for the first).
    pub prev_hash: String,
}

impl ChangeEntry {
    /// Whether `actor` made it: an endpoint id, a human's login (acting, or approving) or an
    /// operator credential id.
    pub fn made_by(&self, actor: &str) -> bool {
        let a = &self.actor;
        [&a.endpoint, &a.human, &a.operator]
            .into_iter()
            .any(|who| who.as_deref() == Some(actor))
            || self.approvers.iter().any(|p| p == actor)
    }
}

/// An entry as stored and exported: its canonical JSON and that text's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub seq: u64,
    pub text: String,
    pub hash: String,
}

/// The last entry of a chain that verified: an operator publishes or pins it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

/// Where a chain stops matching: the entry (by its stored `seq`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    pub seq: u64,
    pub why: BrokenWhy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokenWhy {
    /// The entry's text does not hash to its stored hash: it was edited.
    Edited,
    /// The entry is not the one that should come here: one before it was deleted, or entries
    /// were swapped (`expected` is the seq that should be here).
    OutOfPlace { expected: u64 },
    /// Its `prev_hash` is not the hash of the entry before it.
    Unlinked,
    /// Its text is not an entry.
    Unreadable(String),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.why {
            BrokenWhy::Edited => write!(f, "entry {} was changed after it was written", self.seq),
            BrokenWhy::OutOfPlace { expected } => write!(
                f,
                "entry {} stands where entry {expected} should: an entry was deleted or moved",
                self.seq
            ),
            BrokenWhy::Unlinked => write!(
                f,
                "entry {} does not name the hash of the entry before it",
                self.seq
            ),
            BrokenWhy::Unreadable(e) => write!(f, "entry {} does not read: {e}", self.seq),
        }
    }
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Seals `entry` as the entry after `prev` (none: the first): its seq and `prev_hash` set, its
/// canonical text and that text's hash.
pub fn seal(mut entry: ChangeEntry, prev: Option<&Head>) -> Sealed {
    entry.seq = prev.map_or(1, |h| h.seq + 1);
    entry.prev_hash = prev.map_or_else(|| GENESIS.to_string(), |h| h.hash.clone());
    let value = serde_json::to_value(&entry).unwrap_or(Value::Null);
    let mut text = String::new();
    crate::write_canonical(&value, &mut text);
    Sealed {
        seq: entry.seq,
        hash: sha256_hex(&text),
        text,
    }
}

/// Opens a sealed entry: its text must hash to its stored hash and read as an entry.
fn open(sealed: &Sealed) -> Result<ChangeEntry, Broken> {
    let broken = |why| Broken {
        seq: sealed.seq,
        why,
    };
    if sha256_hex(&sealed.text) != sealed.hash {
        return Err(broken(BrokenWhy::Edited));
    }
    serde_json::from_str(&sealed.text).map_err(|e| broken(BrokenWhy::Unreadable(e.to_string())))
}

/// Verifies a chain read in seq order, from its first entry (`start` none) or from an entry
/// already trusted (`start`: the head a previous verify answered). Answers the last entry's
/// head, or the first entry that does not match.
pub fn verify<'a>(
    entries: impl IntoIterator<Item = &'a Sealed>,
    start: Option<Head>,
) -> Result<Option<Head>, Broken> {
    let mut head = start;
    for sealed in entries {
        let expected = head.as_ref().map_or(1, |h| h.seq + 1);
        let entry = open(sealed)?;
        if entry.seq != sealed.seq || sealed.seq != expected {
            // Named by the seq it was written with: the entry that stands out of its place.
            return Err(Broken {
                seq: entry.seq,
                why: BrokenWhy::OutOfPlace { expected },
            });
        }
        let prev = head.as_ref().map_or(GENESIS, |h| h.hash.as_str());
        if entry.prev_hash != prev {
            return Err(Broken {
                seq: sealed.seq,
                why: BrokenWhy::Unlinked,
            });
        }
        head = Some(Head {
            seq: sealed.seq,
            hash: sealed.hash.clone(),
        });
    }
    Ok(head)
}

/// Verifies an extract of the chain — a scope's entries, in seq order, with gaps where other
/// scopes' entries stand: each entry's text hashes to its hash and names its own seq, seqs
/// only grow, and where two entries are consecutive the later names the earlier's hash. What
/// lies in the gaps is only checked by [`verify`] over the whole chain (an operator's export).
pub fn verify_extract<'a>(entries: impl IntoIterator<Item = &'a Sealed>) -> Result<usize, Broken> {
    let mut last: Option<Head> = None;
    let mut checked = 0;
    for sealed in entries {
        let entry = open(sealed)?;
        let after = last.as_ref().map_or(0, |h| h.seq);
        if entry.seq != sealed.seq || sealed.seq <= after {
            return Err(Broken {
                seq: entry.seq,
                why: BrokenWhy::OutOfPlace {
                    expected: after + 1,
                },
            });
        }
        let linked = match &last {
            Some(h) if h.seq + 1 == sealed.seq => entry.prev_hash == h.hash,
            None if sealed.seq == 1 => entry.prev_hash == GENESIS,
            _ => true,
        };
        if !linked {
            return Err(Broken {
                seq: sealed.seq,
                why: BrokenWhy::Unlinked,
            });
        }
        last = Some(Head {
            seq: sealed.seq,
            hash: sealed.hash.clone(),
        });
        checked += 1;
    }
    Ok(checked)
}

/// A line of an export that is not an exported entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: not JSON: {why}")]
pub struct BadExport {
    pub line: usize,
    pub why: String,
}

/// Reads an export — JSON Lines of `{"entry": …, "hash": …}`, as `changes export` writes
/// them — back into sealed entries: each entry's canonical text, its seq and its stored hash,
/// ready for [`verify`] (a whole chain) or [`verify_extract`] (a scope's). Blank lines are
/// skipped; an entry that was edited reads, and the verify names it.
pub fn read_export(text: &str) -> Result<Vec<Sealed>, BadExport> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, line)| {
            let v: Value = serde_json::from_str(line).map_err(|e| BadExport {
                line: n + 1,
                why: e.to_string(),
            })?;
            let mut text = String::new();
            crate::write_canonical(&v["entry"], &mut text);
            Ok(Sealed {
                seq: v["entry"]["seq"].as_u64().unwrap_or(0),
                text,
                hash: v["hash"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extract_with_gaps_verifies_and_an_edit_or_a_swap_is_named() {
        let log = chain(6);
        let extract: Vec<Sealed> = [0, 1, 3, 5].iter().map(|&i| log[i].clone()).collect();
        assert_eq!(verify_extract(&extract), Ok(4));
        let mut edited = extract.clone();
        edited[2].text = edited[2].text.replace("alice", "mallory");
        assert_eq!(verify_extract(&edited).map_err(|b| b.seq), Err(4));
        let mut swapped = extract.clone();
        swapped.swap(1, 2);
        assert!(matches!(
            verify_extract(&swapped),
            Err(Broken {
                why: BrokenWhy::OutOfPlace { .. },
                ..
            })
        ));
    }

    #[test]
    fn an_export_reads_back_to_the_chain_it_was_written_from() {
        let log = chain(3);
        let lines: String = log
            .iter()
            .map(|s| {
                let entry: Value = serde_json::from_str(&s.text).expect("json");
                format!(
                    "{}\n\n",
                    serde_json::json!({"entry": entry, "hash": s.hash})
                )
            })
            .collect();
        assert_eq!(read_export(&lines), Ok(log.clone()));
        assert_eq!(
            verify(&read_export(&lines).expect("read"), None).map(|h| h.map(|h| h.seq)),
            Ok(Some(3))
        );
        let bad = format!("{lines}{{not json\n");
        assert_eq!(read_export(&bad).map_err(|e| e.line), Err(7));
    }

    #[test]
    fn an_actor_is_described_one_way() {
        let actor = |e: Option<&str>, h: Option<&str>, o: Option<&str>| ChangeActor {
            endpoint: e.map(Into::into),
            human: h.map(Into::into),
            operator: o.map(Into::into),
        };
        assert_eq!(
            actor(Some("ep_1"), Some("alice"), None).describe(),
            "alice via ep_1"
        );
        assert_eq!(actor(None, Some("alice"), None).describe(), "alice");
        assert_eq!(actor(Some("ep_1"), None, None).describe(), "ep_1");
        assert_eq!(actor(None, None, Some("op_1")).describe(), "operator op_1");
        assert_eq!(actor(None, None, None).describe(), "an operator");
    }

    fn change(n: i64) -> ChangeEntry {
        ChangeEntry {
            seq: 0,
            at_ms: 1_765_000_000_000 + n,
            kind: ChangeKind::Configuration,
            actor: ChangeActor {
                endpoint: Some("ep_agent".into()),
                human: Some("alice".into()),
                operator: None,
            },
            approvers: vec!["bob".into()],
            owner_scope: Some("team:ops".into()),
            webhook_id: Some("wh_1".into()),
            version: Some(n),
            digest_before: Some(format!("{:064x}", n - 1)),
            digest_after: Some(format!("{n:064x}")),
            evidence: BTreeMap::from([("plan".to_string(), format!("pl_{n}"))]),
            detail: BTreeMap::new(),
            prev_hash: String::new(),
        }
    }

    fn chain(n: i64) -> Vec<Sealed> {
        let mut out: Vec<Sealed> = Vec::new();
        for i in 1..=n {
            let prev = out.last().map(|s| Head {
                seq: s.seq,
                hash: s.hash.clone(),
            });
            out.push(seal(change(i), prev.as_ref()));
        }
        out
    }

    #[test]
    fn a_clean_chain_verifies_to_its_head_and_goes_on_from_it() {
        let log = chain(5);
        let head = verify(&log, None).expect("clean").expect("a head");
        assert_eq!((head.seq, head.hash.as_str()), (5, log[4].hash.as_str()));
        assert_eq!(verify(&log[..0], None), Ok(None), "an empty log");
        // Verifying from a pinned head checks only what came after it.
        let pinned = Head {
            seq: 3,
            hash: log[2].hash.clone(),
        };
        assert_eq!(verify(&log[3..], Some(pinned)), Ok(Some(head)));
        let first: ChangeEntry = serde_json::from_str(&log[0].text).expect("an entry");
        assert_eq!(first.prev_hash, GENESIS);
    }

    #[test]
    fn a_changed_byte_in_any_entry_names_that_entry() {
        for at in 0..5 {
            let mut log = chain(5);
            log[at].text = log[at].text.replacen("alice", "mallory", 1);
            assert_eq!(
                verify(&log, None),
                Err(Broken {
                    seq: at as u64 + 1,
                    why: BrokenWhy::Edited
                })
            );
        }
        // Rewriting the entry and its hash alike breaks the next entry's link.
        let mut log = chain(5);
        let mut entry: ChangeEntry = serde_json::from_str(&log[1].text).expect("entry");
        entry.approvers.clear();
        let forged = seal(
            entry,
            Some(&Head {
                seq: 1,
                hash: log[0].hash.clone(),
            }),
        );
        log[1] = forged;
        let broken = verify(&log, None).expect_err("found");
        assert_eq!(
            broken,
            Broken {
                seq: 3,
                why: BrokenWhy::Unlinked
            }
        );
        assert_eq!(
            broken.to_string(),
            "entry 3 does not name the hash of the entry before it"
        );
    }

    #[test]
    fn a_deleted_entry_and_two_swapped_entries_are_named() {
        let mut deleted = chain(5);
        deleted.remove(2);
        assert_eq!(
            verify(&deleted, None),
            Err(Broken {
                seq: 4,
                why: BrokenWhy::OutOfPlace { expected: 3 }
            })
        );
        let mut swapped = chain(5);
        swapped.swap(1, 2);
        assert_eq!(
            verify(&swapped, None),
            Err(Broken {
                seq: 3,
                why: BrokenWhy::OutOfPlace { expected: 2 }
            })
        );
        // The last entry deleted leaves a shorter chain that verifies: the head an operator
        // published or pinned is what shows it.
        let mut truncated = chain(5);
        truncated.pop();
        let head = verify(&truncated, None).expect("a prefix").expect("head");
        assert_eq!(head.seq, 4);
    }

    #[test]
    fn an_entry_reads_back_as_written_and_its_text_is_canonical() {
        let log = chain(2);
        let entry: ChangeEntry = serde_json::from_str(&log[1].text).expect("entry");
        assert_eq!(entry.seq, 2);
        assert_eq!(entry.prev_hash, log[0].hash);
        let mut again = String::new();
        crate::write_canonical(&serde_json::to_value(&entry).expect("json"), &mut again);
        assert_eq!(again, log[1].text, "the text is the entry's canonical form");
    }
}
