//! A decision's label: what plans count, totals group, transitions name and events record.
//! One definition, shared by the router's decisions and the configuration's actions.

use std::fmt;

/// `queue:<name>`, `drop`, `quarantine`, `default` (the webhook's default queue, no rule
/// matched) or `fault`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label<'a> {
    Queue(&'a str),
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
                Some(q) if !q.is_empty() => Ok(Label::Queue(q)),
                _ => Err(UnknownLabel(text.to_string())),
            },
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

    /// [`Label::loses_work`] of two labels' text; a text that is no label loses nothing.
    pub fn loses_work_text(from: &str, to: &str) -> bool {
        match (Label::parse(from), Label::parse(to)) {
            (Ok(from), Ok(to)) => Label::loses_work(&from, &to),
            _ => false,
        }
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
            (Label::Queue("review"), "queue:review"),
            (Label::Drop, "drop"),
            (Label::Quarantine, "quarantine"),
            (Label::Default, "default"),
            (Label::Fault, "fault"),
        ];
        for (label, text) in all {
            assert_eq!(label.to_string(), text);
            assert_eq!(Label::parse(text), Ok(label));
        }
        for bad in ["", "queue:", "Drop", "queue", "todo"] {
            assert!(Label::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lost_work_is_work_that_stops_reaching_its_queue() {
        let work = [Label::Queue("review"), Label::Default];
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
        assert!(Label::loses_work_text("queue:a", "drop"));
        assert!(!Label::loses_work_text("queue:a", "queue:b"));
        assert!(!Label::loses_work_text("nonsense", "drop"));
    }

    #[test]
    fn a_fault_delivers_work_only_where_faults_fail_open() {
        assert!(Label::Fault.delivers_work(false));
        assert!(!Label::Fault.delivers_work(true));
        assert!(Label::Default.delivers_work(true));
        assert!(!Label::Quarantine.delivers_work(false));
    }
}
