//! Verb families (SPEC-0014 as BASE.md fixes it): the tool names an endpoint may call,
//! grouped so that vending can name a whole family. Pure data; no I/O.

/// A family: its name and its verbs, in the order tools are listed.
pub struct Family {
    pub name: &'static str,
    pub verbs: &'static [&'static str],
}

/// Every family, in the order the vend wizard shows them.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "webhooks",
        verbs: &[
            "create_webhook",
            "list_webhooks",
            "get_webhook",
            "delete_webhook",
            "list_webhook_events",
            "get_webhook_event",
            "explain_webhook_event",
            "rotate_webhook_secret",
        ],
    },
    Family {
        name: "webhook-rules",
        verbs: &[
            "list_webhook_rules",
            "set_webhook_rules",
            "update_webhook_rule",
            "delete_webhook_rule",
            "test_webhook_rules",
            "list_rule_packs",
            "install_rule_pack",
            "remove_rule_pack",
            "get_rule_pack_plan",
            "list_webhook_history",
            "redrive_webhook_events",
            "confirm_webhook_redrive",
        ],
    },
    // Putting a plan live is a right of its own (issue 20): an endpoint vended `webhook-rules`
    // without this family plans and proposes, but its confirm is refused.
    Family {
        name: "rule-pack-confirm",
        verbs: &["confirm_rule_pack_plan"],
    },
    Family {
        name: "todos",
        verbs: &["list_todos", "claim_todo", "release_todo", "complete_todo"],
    },
];

/// The family a verb belongs to, or `None` for a name that is no verb.
pub fn family_of(verb: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|f| f.verbs.contains(&verb))
        .map(|f| f.name)
}

/// The canonical `&'static str` for a verb name, if it is one.
pub fn verb(name: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .flat_map(|f| f.verbs.iter())
        .find(|v| **v == name)
        .copied()
}

/// Expands family names and single verbs into verbs, deduplicated, in table order.
///
/// Endpoints store the expanded list, so a family that grows later does not silently widen
/// an allowlist that was consented to before the growth.
pub fn expand<S: AsRef<str>>(names: &[S]) -> Result<Vec<&'static str>, String> {
    let mut wanted = Vec::new();
    for name in names {
        let name = name.as_ref();
        if let Some(family) = FAMILIES.iter().find(|f| f.name == name) {
            wanted.extend_from_slice(family.verbs);
        } else if let Some(v) = verb(name) {
            wanted.push(v);
        } else {
            return Err(format!("{name:?} is neither a verb family nor a verb"));
        }
    }
    Ok(FAMILIES
        .iter()
        .flat_map(|f| f.verbs.iter().copied())
        .filter(|v| wanted.contains(v))
        .collect())
}

/// Groups verbs by family for display (the vend consent step): `(family, verbs)` in table order.
pub fn group_by_family<S: AsRef<str>>(verbs: &[S]) -> Vec<(&'static str, Vec<&'static str>)> {
    FAMILIES
        .iter()
        .filter_map(|f| {
            let held: Vec<&'static str> = f
                .verbs
                .iter()
                .copied()
                .filter(|v| verbs.iter().any(|x| x.as_ref() == *v))
                .collect();
            (!held.is_empty()).then_some((f.name, held))
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
        assert_eq!(expand(&["webhooks"]).unwrap().len(), 8);
        assert_eq!(expand(&["webhook-rules"]).unwrap().len(), 12);
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
            .flat_map(|f| f.verbs.iter().copied())
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
