//! The verbs: the MCP tool names an endpoint may call (SPEC-0014 as BASE.md fixes it), each
//! with its family, the role it needs and its tool annotations. One table, so that control's
//! allowlists and roles and the gateway's tool catalog cannot disagree about a verb.

use std::fmt;
use std::str::FromStr;

use crate::Role;

/// A name that is no verb.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a verb")]
pub struct UnknownVerb(pub String);

/// Declares [`Family`] and [`Verb`] from one table: families in the order the vend wizard
/// shows them, each family's verbs in the order tools are listed.
macro_rules! verbs {
    ($(
        $(#[$family_doc:meta])*
        $family:ident = $family_name:literal {
            $(
                $verb:ident = $verb_name:literal, $role:ident,
                read_only: $read_only:literal, destructive: $destructive:literal,
                idempotent: $idempotent:literal;
            )+
        }
    )+) => {
        /// A family of verbs: vending can name a whole family.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Family {
            $( $(#[$family_doc])* $family, )+
        }

        /// A verb: one MCP tool an endpoint may be allowed to call.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Verb {
            $( $( $verb, )+ )+
        }

        impl Family {
            /// Every family, in table order.
            pub const ALL: &'static [Family] = &[ $( Family::$family, )+ ];

            /// The family's name, as vending and the console spell it.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Family::$family => $family_name, )+
                }
            }

            /// The family's verbs, in table order.
            pub const fn verbs(self) -> &'static [Verb] {
                match self {
                    $( Family::$family => &[ $( Verb::$verb, )+ ], )+
                }
            }

            /// The family a name names, or `None`.
            pub fn parse(name: &str) -> Option<Family> {
                match name {
                    $( $family_name => Some(Family::$family), )+
                    _ => None,
                }
            }
        }

        impl Verb {
            /// Every verb, in table order (family by family).
            pub const ALL: &'static [Verb] = &[ $( $( Verb::$verb, )+ )+ ];

            /// The verb's name: its MCP tool name and its entry in an endpoint's allowlist.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $( Verb::$verb => $verb_name, )+ )+
                }
            }

            /// The verb a name names, or `None` for a name that is no verb.
            pub fn parse(name: &str) -> Option<Verb> {
                match name {
                    $( $( $verb_name => Some(Verb::$verb), )+ )+
                    _ => None,
                }
            }

            /// The one family the verb belongs to.
            pub const fn family(self) -> Family {
                match self {
                    $( $( Verb::$verb => Family::$family, )+ )+
                }
            }

            /// The role the caller's human needs in the endpoint's owner scope.
            pub const fn role(self) -> Role {
                match self {
                    $( $( Verb::$verb => Role::$role, )+ )+
                }
            }

            /// The tool changes nothing (a read-only gateway offers only these).
            pub const fn read_only(self) -> bool {
                match self {
                    $( $( Verb::$verb => $read_only, )+ )+
                }
            }

            /// The tool may overwrite or remove what is there (meaningful when not read-only).
            pub const fn destructive(self) -> bool {
                match self {
                    $( $( Verb::$verb => $destructive, )+ )+
                }
            }

            /// Calling the tool again with the same arguments changes nothing more.
            pub const fn idempotent(self) -> bool {
                match self {
                    $( $( Verb::$verb => $idempotent, )+ )+
                }
            }
        }
    };
}

// Roles: viewer reads (explaining a decision and dry runs included: they write nothing);
// editor changes rules, plans and takes work; admin manages webhooks.
verbs! {
    Webhooks = "webhooks" {
        CreateWebhook = "create_webhook", Admin,
            read_only: false, destructive: false, idempotent: false;
        ListWebhooks = "list_webhooks", Viewer,
            read_only: true, destructive: false, idempotent: true;
        GetWebhook = "get_webhook", Viewer,
            read_only: true, destructive: false, idempotent: true;
        DeleteWebhook = "delete_webhook", Admin,
            read_only: false, destructive: true, idempotent: true;
        ListWebhookEvents = "list_webhook_events", Viewer,
            read_only: true, destructive: false, idempotent: true;
        GetWebhookEvent = "get_webhook_event", Viewer,
            read_only: true, destructive: false, idempotent: true;
        ExplainWebhookEvent = "explain_webhook_event", Viewer,
            read_only: true, destructive: false, idempotent: true;
        RotateWebhookSecret = "rotate_webhook_secret", Admin,
            read_only: false, destructive: true, idempotent: false;
        // A display name (issue 48): an editor's, like the console's rename.
        RenameWebhook = "rename_webhook", Editor,
            read_only: false, destructive: false, idempotent: true;
    }
    WebhookRules = "webhook-rules" {
        ListWebhookRules = "list_webhook_rules", Viewer,
            read_only: true, destructive: false, idempotent: true;
        SetWebhookRules = "set_webhook_rules", Editor,
            read_only: false, destructive: true, idempotent: true;
        UpdateWebhookRule = "update_webhook_rule", Editor,
            read_only: false, destructive: true, idempotent: true;
        DeleteWebhookRule = "delete_webhook_rule", Editor,
            read_only: false, destructive: true, idempotent: true;
        TestWebhookRules = "test_webhook_rules", Editor,
            read_only: true, destructive: false, idempotent: true;
        ListRulePacks = "list_rule_packs", Viewer,
            read_only: true, destructive: false, idempotent: true;
        // Planning saves nothing, so it is not destructive; the confirm applies.
        InstallRulePack = "install_rule_pack", Editor,
            read_only: false, destructive: false, idempotent: false;
        RemoveRulePack = "remove_rule_pack", Editor,
            read_only: false, destructive: false, idempotent: false;
        GetRulePackPlan = "get_rule_pack_plan", Viewer,
            read_only: true, destructive: false, idempotent: true;
        // A confirmed change's guard (issue 46): the replaced rules in its shadow.
        GetRuleGuard = "get_rule_guard", Viewer,
            read_only: true, destructive: false, idempotent: true;
        // Plans a hand-written configuration (issue 45): saves nothing; the confirm applies.
        PlanWebhookRules = "plan_webhook_rules", Editor,
            read_only: false, destructive: false, idempotent: false;
        ListWebhookHistory = "list_webhook_history", Viewer,
            read_only: true, destructive: false, idempotent: true;
        // The change log, as the scope's owners read it (issue 47).
        ListWebhookChanges = "list_webhook_changes", Viewer,
            read_only: true, destructive: false, idempotent: true;
        RedriveWebhookEvents = "redrive_webhook_events", Editor,
            read_only: false, destructive: false, idempotent: false;
        ConfirmWebhookRedrive = "confirm_webhook_redrive", Editor,
            read_only: false, destructive: true, idempotent: false;
    }
    /// Putting a plan live is a right of its own (issue 20): an endpoint vended
    /// `webhook-rules` without this family plans and proposes, but its confirm is refused.
    RulePackConfirm = "rule-pack-confirm" {
        ConfirmRulePackPlan = "confirm_rule_pack_plan", Editor,
            read_only: false, destructive: true, idempotent: false;
    }
    /// Trials (issue 45): a plan's candidate beside the live rules on live deliveries. Read-mostly:
    /// starting and stopping one routes nothing, and promoting one only plans; its confirm
    /// needs `rule-pack-confirm` like any plan's.
    RuleTrials = "rule-trials" {
        StartRuleTrial = "start_rule_trial", Editor,
            read_only: false, destructive: false, idempotent: false;
        StopRuleTrial = "stop_rule_trial", Editor,
            read_only: false, destructive: false, idempotent: true;
        GetRuleTrial = "get_rule_trial", Viewer,
            read_only: true, destructive: false, idempotent: true;
        ListRuleTrials = "list_rule_trials", Viewer,
            read_only: true, destructive: false, idempotent: true;
        PromoteRuleTrial = "promote_rule_trial", Editor,
            read_only: false, destructive: false, idempotent: false;
    }
    Todos = "todos" {
        ListTodos = "list_todos", Viewer,
            read_only: true, destructive: false, idempotent: true;
        ClaimTodo = "claim_todo", Editor,
            read_only: false, destructive: false, idempotent: true;
        ReleaseTodo = "release_todo", Editor,
            read_only: false, destructive: false, idempotent: true;
        CompleteTodo = "complete_todo", Editor,
            read_only: false, destructive: false, idempotent: true;
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Verb {
    type Err = UnknownVerb;

    fn from_str(s: &str) -> Result<Self, UnknownVerb> {
        Verb::parse(s).ok_or_else(|| UnknownVerb(s.to_string()))
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Expands family names and single verbs into verbs' names, deduplicated, in table order.
///
/// Endpoints store the expanded list, so a family that grows later does not silently widen
/// an allowlist that was consented to before the growth. Here, beside the table, because
/// control's API checks a vend request with it and the store expands what it saves with it.
pub fn expand<S: AsRef<str>>(names: &[S]) -> Result<Vec<&'static str>, String> {
    let mut wanted = Vec::new();
    for name in names {
        let name = name.as_ref();
        if let Some(family) = Family::parse(name) {
            wanted.extend_from_slice(family.verbs());
        } else if let Some(v) = Verb::parse(name) {
            wanted.push(v);
        } else {
            return Err(format!("{name:?} is neither a verb family nor a verb"));
        }
    }
    Ok(Verb::ALL
        .iter()
        .filter(|v| wanted.contains(v))
        .map(|v| v.as_str())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_round_trips_through_its_name() {
        for &verb in Verb::ALL {
            assert_eq!(Verb::parse(verb.as_str()), Some(verb));
            assert_eq!(verb.to_string().parse::<Verb>(), Ok(verb));
        }
        for &family in Family::ALL {
            assert_eq!(Family::parse(family.name()), Some(family));
        }
    }

    #[test]
    fn unknown_names_parse_to_none() {
        for name in ["", "todos", "drop_database", "List_todos", "list_todos "] {
            assert_eq!(Verb::parse(name), None, "{name:?}");
        }
        assert_eq!(
            "drop_database".parse::<Verb>(),
            Err(UnknownVerb("drop_database".into()))
        );
        assert_eq!(Family::parse("todo"), None);
        assert_eq!(Family::parse("list_todos"), None);
    }

    #[test]
    fn families_partition_all_verbs_in_table_order() {
        let concatenated: Vec<Verb> = Family::ALL
            .iter()
            .flat_map(|f| f.verbs())
            .copied()
            .collect();
        assert_eq!(concatenated, Verb::ALL);
        for &verb in Verb::ALL {
            let holding: Vec<Family> = Family::ALL
                .iter()
                .copied()
                .filter(|f| f.verbs().contains(&verb))
                .collect();
            assert_eq!(holding, [verb.family()], "{verb}");
        }
        assert_eq!(Verb::ALL.len(), 34);
    }

    #[test]
    fn names_are_distinct() {
        for (i, a) in Verb::ALL.iter().enumerate() {
            for b in &Verb::ALL[i + 1..] {
                assert_ne!(a.as_str(), b.as_str());
            }
        }
    }

    #[test]
    fn read_only_verbs_are_never_destructive() {
        for &verb in Verb::ALL {
            assert!(!(verb.read_only() && verb.destructive()), "{verb}");
        }
    }
}
