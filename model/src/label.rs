//! A decision's label: what plans count, totals group, transitions name and events record.
//! One definition, shared by the router's decisions and the configuration's actions.
//!
//! A label borrows its queue name where it is read off a decision (`Label<'_>`) and owns it
//! where a plan keeps it (`Label<'static>`). Either way it is its text in JSON, in order and
//! in a schema, so plans stored as strings read back as labels and print the same.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `queue:<name>`, `drop`, `quarantine`, `default` (the webhook's default queue, no rule
/// matched) or `fault`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label<'a> {
    Queue(Cow<'a, str>),
    Drop,
    Quarantine,
    Default,
    Fault,
}

/// A text that is not a label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a decision label (queue:<name>, drop, quarantine, default or fault)")]
pub struct UnknownLabel(pub String);

impl<'a> Label<'a> {
    /// The label a text names, as [`fmt::Display`] prints it: the one place label text is
    /// read back.
    pub fn parse(text: &'a str) -> Result<Label<'a>, UnknownLabel> {
        match text {
            "drop" => Ok(Label::Drop),
            "quarantine" => Ok(Label::Quarantine),
            "default" => Ok(Label::Default),
            "fault" => Ok(Label::Fault),
            _ => match text.strip_prefix("queue:") {
                Some(q) if !q.is_empty() => Ok(Label::Queue(Cow::Borrowed(q))),
                _ => Err(UnknownLabel(text.to_string())),
            },
        }
    }

    /// The label of a decision to a queue named `name`.
    pub fn queue(name: &'a str) -> Label<'a> {
        Label::Queue(Cow::Borrowed(name))
    }

    /// The same label, owning its queue name, to be kept beyond the text it was read from.
    pub fn into_owned(self) -> Label<'static> {
        match self {
            Label::Queue(q) => Label::Queue(Cow::Owned(q.into_owned())),
            Label::Drop => Label::Drop,
            Label::Quarantine => Label::Quarantine,
            Label::Default => Label::Default,
            Label::Fault => Label::Fault,
        }
    }

    /// The label's text in two pieces (`queue:` and the name), so labels compare as their
    /// text without writing it out.
    fn text_parts(&self) -> (&'static str, &str) {
        match self {
            Label::Queue(q) => ("queue:", q),
            Label::Drop => ("drop", ""),
            Label::Quarantine => ("quarantine", ""),
            Label::Default => ("default", ""),
            Label::Fault => ("fault", ""),
        }
    }

    /// Every [`Label::family`] word, for what must name each before any is seen (a metric's
    /// series at zero).
    pub const FAMILIES: [&'static str; 5] = ["queue", "drop", "quarantine", "default", "fault"];

    /// The label's kind without its queue name (`queue`, `drop`, `quarantine`, `default`,
    /// `fault`): what metrics count by, so a tenant's queue names never become series.
    pub fn family(&self) -> &'static str {
        match self {
            Label::Queue(_) => "queue",
            Label::Drop => "drop",
            Label::Quarantine => "quarantine",
            Label::Default => "default",
            Label::Fault => "fault",
        }
    }

    /// Whether a delivery so decided becomes a todo: a queue decision (the rule's queue or
    /// the default one) — and a fault too where faults fail open into the default queue
    /// (`fail_closed` false: an instance without the trusted-actors capability).
    pub fn delivers_work(&self, fail_closed: bool) -> bool {
        match self {
            Label::Queue(_) | Label::Default => true,
            Label::Fault => !fail_closed,
            Label::Drop | Label::Quarantine => false,
        }
    }

    /// **Lost work**, the one definition (docs/rule-packs/lost-work.md): a delivery its rules
    /// sent to a queue (or the default queue) that a change would drop, quarantine or fault.
    /// Each stops reaching the queue its rules chose: a drop loses it, a quarantine holds it
    /// until a person releases it, and a fault is quarantined (fail closed) or lands in the
    /// default queue marked faulted. Plans, replay reports, the console, the CLI and MCP list
    /// these transitions first.
    pub fn loses_work(from: &Label<'_>, to: &Label<'_>) -> bool {
        matches!(from, Label::Queue(_) | Label::Default)
            && matches!(to, Label::Drop | Label::Quarantine | Label::Fault)
    }

    /// What a redrive gives up (docs/rule-packs/lost-work.md): it re-routes deliveries that
    /// made no todo (quarantined, faulted, pending), so only a drop ends one for good; a
    /// redrive plan lists these first.
    pub fn redrive_gives_up(to: &Label<'_>) -> bool {
        matches!(to, Label::Drop)
    }
}

/// Labels order as their text does (`default` < `drop` < … < `queue:a`), so totals keyed by
/// label and transitions sorted by label list in the order they did as strings.
impl Ord for Label<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.text_parts(), other.text_parts());
        a.0.bytes()
            .chain(a.1.bytes())
            .cmp(b.0.bytes().chain(b.1.bytes()))
    }
}

impl PartialOrd for Label<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `default`: what a plan's label reads as where an odd stored plan left it out (plans'
/// types read leniently, field by field).
impl Default for Label<'_> {
    fn default() -> Self {
        Label::Default
    }
}

impl FromStr for Label<'static> {
    type Err = UnknownLabel;

    fn from_str(text: &str) -> Result<Self, UnknownLabel> {
        Label::parse(text).map(Label::into_owned)
    }
}

impl PartialEq<str> for Label<'_> {
    fn eq(&self, text: &str) -> bool {
        let (head, tail) = self.text_parts();
        text.strip_prefix(head) == Some(tail)
    }
}

impl PartialEq<&str> for Label<'_> {
    fn eq(&self, text: &&str) -> bool {
        self == *text
    }
}

impl Serialize for Label<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read from its text; a text that is no label is an error, never a guess.
impl<'de> Deserialize<'de> for Label<'static> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A label is a string in JSON, so its schema is exactly a string's: output schemas read
/// the same as when plans held label text.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Label<'_> {
    fn inline_schema() -> bool {
        <String as schemars::JsonSchema>::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        <String as schemars::JsonSchema>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        <String as schemars::JsonSchema>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <String as schemars::JsonSchema>::json_schema(generator)
    }
}

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Queue(q) => write!(f, "queue:{q}"),
            Label::Drop => f.write_str("drop"),
            Label::Quarantine => f.write_str("quarantine"),
            Label::Default => f.write_str("default"),
            Label::Fault => f.write_str("fault"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_plans_print_them() {
        let all = [
            (Label::queue("review"), "queue:review"),
            (Label::Drop, "drop"),
            (Label::Quarantine, "quarantine"),
            (Label::Default, "default"),
            (Label::Fault, "fault"),
        ];
        for (label, text) in all {
            assert_eq!(label.to_string(), text);
            assert!(Label::FAMILIES.contains(&label.family()), "{text}");
            assert_eq!(Label::parse(text), Ok(label));
        }
        for bad in ["", "queue:", "Drop", "queue", "todo"] {
            assert!(Label::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Metrics count by family: a queue's name never becomes part of a series.
    #[test]
    fn a_label_s_family_leaves_out_the_queue_name() {
        for (label, family) in [
            (Label::queue("tenant-secret-queue"), "queue"),
            (Label::Drop, "drop"),
            (Label::Quarantine, "quarantine"),
            (Label::Default, "default"),
            (Label::Fault, "fault"),
        ] {
            assert_eq!(label.family(), family);
            assert!(label.to_string().starts_with(family));
        }
    }

    #[test]
    fn lost_work_is_work_that_stops_reaching_its_queue() {
        let work = [Label::queue("review"), Label::Default];
        let not_work = [Label::Drop, Label::Quarantine, Label::Fault];
        for from in &work {
            for to in &not_work {
                assert!(Label::loses_work(from, to), "{from} -> {to}");
            }
            for to in &work {
                assert!(!Label::loses_work(from, to), "{from} -> {to}");
            }
        }
        for from in &not_work {
            for to in work.iter().chain(&not_work) {
                assert!(!Label::loses_work(from, to), "{from} -> {to}");
            }
        }
    }

    /// Plans stored as label text read back as labels, print and order the same.
    #[test]
    fn a_label_is_its_text_in_json_and_in_order() {
        let texts = [
            "default",
            "drop",
            "fault",
            "quarantine",
            "queue:a",
            "queue:b",
        ];
        let labels: Vec<Label<'static>> = texts
            .iter()
            .map(|t| serde_json::from_value(serde_json::json!(t)).expect("a label"))
            .collect();
        let mut sorted = labels.clone();
        sorted.sort();
        assert_eq!(sorted, labels);
        for (label, text) in labels.iter().zip(texts) {
            assert_eq!(
                serde_json::to_value(label).expect("json"),
                serde_json::json!(text)
            );
            assert!(*label == text);
        }
        assert!(Label::queue("ab") > Label::queue("a"));
        assert!(Label::queue("a") != "queue:");
        assert!(serde_json::from_value::<Label<'static>>(serde_json::json!("todo")).is_err());
    }

    #[test]
    fn a_fault_delivers_work_only_where_faults_fail_open() {
        assert!(Label::Fault.delivers_work(false));
        assert!(!Label::Fault.delivers_work(true));
        assert!(Label::Default.delivers_work(true));
        assert!(!Label::Quarantine.delivers_work(false));
    }
}
