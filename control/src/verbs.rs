//! Verb families (SPEC-0014 as BASE.md fixes it): the tool names an endpoint may call,
//! grouped so that vending can name a whole family. The table is the model's [`Verb`] and
//! [`Family`]; these are control's string-facing reads of it. Pure; no I/O.

pub use switchboard_model::{Family, Verb};

/// Every family, in the order the vend wizard shows them (the model's table).
pub const FAMILIES: &[Family] = Family::ALL;

/// The family a verb belongs to, or `None` for a name that is no verb.
pub fn family_of(verb: &str) -> Option<&'static str> {
    Verb::parse(verb).map(|v| v.family().name())
}

/// The canonical `&'static str` for a verb name, if it is one.
pub fn verb(name: &str) -> Option<&'static str> {
    Verb::parse(name).map(Verb::as_str)
}

/// Expands family names and single verbs into verbs, deduplicated, in table order (the
/// model's, beside the table: the store expands what it saves with it too).
pub use switchboard_model::verb::expand;

/// Groups verbs by family for display (the vend consent step): `(family, verbs)` in table order.
pub fn group_by_family<S: AsRef<str>>(verbs: &[S]) -> Vec<(&'static str, Vec<&'static str>)> {
    FAMILIES
        .iter()
        .filter_map(|f| {
            let held: Vec<&'static str> = f
                .verbs()
                .iter()
                .map(|v| v.as_str())
                .filter(|v| verbs.iter().any(|x| x.as_ref() == *v))
                .collect();
            (!held.is_empty()).then_some((f.name(), held))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_expand_to_their_verbs() {
        let v = expand(&["todos"]).unwrap();
        assert_eq!(
            v,
            vec!["list_todos", "claim_todo", "release_todo", "complete_todo"]
        );
        assert_eq!(expand(&["webhooks"]).unwrap().len(), 9);
        assert_eq!(expand(&["webhook-rules"]).unwrap().len(), 15);
        assert_eq!(
            expand(&["rule-pack-confirm"]).unwrap(),
            vec!["confirm_rule_pack_plan"]
        );
    }

    #[test]
    fn families_and_verbs_mix_without_duplicates() {
        let v = expand(&["claim_todo", "todos", "get_webhook"]).unwrap();
        assert_eq!(
            v,
            vec![
                "get_webhook",
                "list_todos",
                "claim_todo",
                "release_todo",
                "complete_todo"
            ]
        );
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(expand(&["todo"]).is_err());
        assert!(expand(&["drop_database"]).is_err());
    }

    #[test]
    fn every_verb_has_exactly_one_family() {
        let all: Vec<&str> = FAMILIES
            .iter()
            .flat_map(|f| f.verbs().iter().map(|v| v.as_str()))
            .collect();
        for v in &all {
            assert_eq!(all.iter().filter(|x| *x == v).count(), 1, "{v}");
            assert!(family_of(v).is_some());
        }
        assert_eq!(family_of("install_rule_pack"), Some("webhook-rules"));
    }

    #[test]
    fn grouping_follows_the_table() {
        let g = group_by_family(&["complete_todo", "list_rule_packs"]);
        assert_eq!(
            g,
            vec![
                ("webhook-rules", vec!["list_rule_packs"]),
                ("todos", vec!["complete_todo"])
            ]
        );
    }
}
