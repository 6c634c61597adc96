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
        }
    }
}
