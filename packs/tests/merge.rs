//! Merge and composition (REQ-6) and upgrade/removal candidates (REQ-7), on small packs.

use serde_json::{Value, json};
use switchboard_model::Configuration;
use switchboard_packs::Pack;
use switchboard_packs::merge::{InstallRequest, MergeError, install_candidate, removal_candidate};
use switchboard_packs::provenance::{InstalledPack, Provenance, drift};

fn pack(v: Value) -> Pack {
    let mut base = json!({
        "version": "1.0.0", "title": "t", "summary": "s", "placement": "prepend",
        "rules": [{"id": "a", "when": "false", "action": {"drop": true}}]
    });
    for (k, val) in v.as_object().unwrap() {
        base[k] = val.clone();
    }
    serde_json::from_value(base).expect("pack")
}

fn config(v: Value) -> Configuration {
    serde_json::from_value(v).expect("configuration")
}

fn ids(c: &Configuration) -> Vec<String> {
    c.rules.iter().map(|r| r.id.clone().unwrap()).collect()
}

/// Installs `p` onto `saved` as a confirm would, returning the new configuration and provenance.
/// The manifest lookup a candidate needs, over `catalog`.
fn find_in(catalog: &[Pack]) -> impl Fn(&str, &str) -> Option<Pack> + '_ {
    move |n: &str, v: &str| {
        catalog
            .iter()
            .find(|x| x.name == n && x.version == v)
            .cloned()
    }
}

fn install(
    saved: &Configuration,
    prov: &Provenance,
    p: &Pack,
    req: InstallRequest,
    catalog: &[Pack],
) -> Result<(Configuration, Provenance), MergeError> {
    install_candidate(saved, prov, p, &req, &find_in(catalog))
        .map(|c| (c.configuration, c.provenance))
}

fn hand_written() -> Configuration {
    config(json!({"rules": [
        {"id": "mine-1", "when": ".event == \"push\"", "action": {"queue": "forge"}},
        {"id": "mine-2", "when": ".event == \"issues\"", "action": {"queue": "triage"}}
    ], "params": {"mine": 1}}))
}

#[test]
fn installing_a_second_pack_keeps_the_first() {
    let nsr = pack(
        json!({"name": "no-self-review", "params_schema": {"identity": {"type": "string", "description": "d"}},
        "rules": [{"id": "x", "when": "false", "action": {"drop": true}}, {"id": "y", "when": "false", "action": {"drop": true}}]}),
    );
    let dcn = pack(
        json!({"name": "drop-ci-noise", "params_schema": {"drop_deleted": {"type": "bool", "default": true, "description": "d"}}}),
    );
    let catalog = vec![nsr.clone(), dcn.clone()];
    let mut req = InstallRequest::default();
    req.params.insert("identity".into(), json!("reviewer-b"));
    let (c1, p1) = install(&hand_written(), &vec![], &nsr, req, &catalog).unwrap();
    assert_eq!(
        ids(&c1),
        ["no-self-review--x", "no-self-review--y", "mine-1", "mine-2"]
    );
    let (c2, p2) = install(&c1, &p1, &dcn, InstallRequest::default(), &catalog).unwrap();
    assert_eq!(
        ids(&c2),
        [
            "no-self-review--x",
            "no-self-review--y",
            "drop-ci-noise--a",
            "mine-1",
            "mine-2"
        ]
    );
    assert_eq!(c2.params["identity"], json!("reviewer-b"));
    assert_eq!(c2.params["mine"], json!(1));
    assert_eq!(c2.params["drop_deleted"], json!(true));
    assert_eq!(p2.len(), 2);
}

#[test]
fn order_is_enforced_requires_pack() {
    let lanes = pack(json!({"name": "handoff-lanes", "requires": {"packs": ["trusted-actors"]}}));
    let err = install(
        &hand_written(),
        &vec![],
        &lanes,
        InstallRequest::default(),
        std::slice::from_ref(&lanes),
    )
    .unwrap_err();
    assert_eq!(err.reason().as_str(), "requires_pack");
    assert!(err.to_string().contains("trusted-actors"));
}

#[test]
fn a_pack_follows_the_packs_it_requires_and_append_packs_go_last() {
    let ta = pack(json!({"name": "trusted-actors"}));
    let lanes = pack(
        json!({"name": "handoff-lanes", "requires": {"packs": ["trusted-actors"]}, "placement": "append"}),
    );
    let catalog = vec![ta.clone(), lanes.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &ta,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    let (c2, _) = install(&c1, &p1, &lanes, InstallRequest::default(), &catalog).unwrap();
    assert_eq!(
        ids(&c2),
        ["trusted-actors--a", "mine-1", "mine-2", "handoff-lanes--a"]
    );
}

#[test]
fn params_supplied_beat_current_values_which_beat_defaults() {
    let p = pack(json!({"name": "pk", "params_schema": {
        "mine": {"type": "int", "default": 5, "description": "d"},
        "fresh": {"type": "int", "default": 7, "description": "d"},
        "given": {"type": "int", "default": 9, "description": "d"}}}));
    let mut req = InstallRequest::default();
    req.params.insert("given".into(), json!(1));
    let find = |_: &str, _: &str| None;
    let c = install_candidate(&hand_written(), &vec![], &p, &req, &find).unwrap();
    assert_eq!(
        c.configuration.params["mine"],
        json!(1),
        "current value kept"
    );
    assert_eq!(c.configuration.params["fresh"], json!(7), "default");
    assert_eq!(c.configuration.params["given"], json!(1), "supplied");
    assert_eq!(c.param_diff.adopted, ["mine"]);
    assert_eq!(c.param_diff.added, ["fresh", "given"]);
}

#[test]
fn a_mistyped_or_missing_param_is_invalid_params() {
    let p = pack(json!({"name": "pk", "params_schema": {
        "trusted_humans": {"type": "string_list", "required": true, "description": "d"}}}));
    let find = |_: &str, _: &str| None;
    let err = install_candidate(
        &hand_written(),
        &vec![],
        &p,
        &InstallRequest::default(),
        &find,
    )
    .unwrap_err();
    assert_eq!(err.reason().as_str(), "invalid_params");
    let mut req = InstallRequest::default();
    req.params.insert("trusted_humans".into(), json!("alice"));
    let err = install_candidate(&hand_written(), &vec![], &p, &req, &find).unwrap_err();
    assert_eq!(err.reason().as_str(), "invalid_params");
    assert!(err.to_string().contains("trusted_humans"), "{err}");
    let mut req = InstallRequest::default();
    req.params.insert("nope".into(), json!(1));
    assert_eq!(
        install_candidate(&hand_written(), &vec![], &p, &req, &find)
            .unwrap_err()
            .reason()
            .as_str(),
        "invalid_params"
    );
}

#[test]
fn a_second_default_action_is_a_default_conflict() {
    let a = pack(json!({"name": "first", "default_action": {"drop": true}}));
    let b = pack(json!({"name": "second", "default_action": {"queue": "forge"}}));
    let catalog = vec![a.clone(), b.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &a,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    assert_eq!(
        c1.default_action.as_ref().map(|a| a.label().to_string()),
        Some("drop".into())
    );
    let err = install(&c1, &p1, &b, InstallRequest::default(), &catalog).unwrap_err();
    assert_eq!(
        err,
        MergeError::DefaultConflict {
            holder: "first".into()
        }
    );
}

#[test]
fn too_many_rules_names_the_packs_and_counts() {
    let rules: Vec<Value> = (0..31)
        .map(|i| json!({"id": format!("r{i}"), "when": "false", "action": {"drop": true}}))
        .collect();
    let big = pack(json!({"name": "big", "rules": rules}));
    let err = install(
        &hand_written(),
        &vec![],
        &big,
        InstallRequest::default(),
        std::slice::from_ref(&big),
    )
    .unwrap_err();
    match err {
        MergeError::TooManyRules {
            total,
            packs,
            hand_written,
            ..
        } => {
            assert_eq!(total, 33);
            assert_eq!(packs, vec![("big".to_string(), 31)]);
            assert_eq!(hand_written, 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn replaces_adopts_hand_written_rules_and_refuses_unknown_or_pack_rules() {
    let p = pack(json!({"name": "pk"}));
    let find = |_: &str, _: &str| None;
    let req = InstallRequest {
        replaces: vec!["mine-1".into()],
        ..Default::default()
    };
    let c = install_candidate(&hand_written(), &vec![], &p, &req, &find).unwrap();
    assert_eq!(ids(&c.configuration), ["pk--a", "mine-2"]);
    assert_eq!(c.rule_diff.replaced, ["mine-1"]);
    assert_eq!(c.rule_diff.added, ["pk--a"]);
    let unknown = InstallRequest {
        replaces: vec!["nope".into()],
        ..Default::default()
    };
    assert_eq!(
        install_candidate(&hand_written(), &vec![], &p, &unknown, &find)
            .unwrap_err()
            .reason()
            .as_str(),
        "invalid_argument"
    );
    let q = pack(json!({"name": "other"}));
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &q,
        InstallRequest::default(),
        std::slice::from_ref(&q),
    )
    .unwrap();
    let pack_rule = InstallRequest {
        replaces: vec!["other--a".into()],
        ..Default::default()
    };
    assert_eq!(
        install_candidate(&c1, &p1, &p, &pack_rule, &find)
            .unwrap_err()
            .reason()
            .as_str(),
        "invalid_argument"
    );
}

#[test]
fn upgrade_over_a_hand_edit_needs_overwrite_local_edits() {
    let v1 = pack(json!({"name": "drop-ci-noise"}));
    let v2 = pack(
        json!({"name": "drop-ci-noise", "version": "2.0.0", "rules": [
        {"id": "a", "when": ".x == 1", "action": {"drop": true}}, {"id": "b", "when": "false", "action": {"drop": true}}]}),
    );
    let catalog = vec![v1.clone(), v2.clone()];
    let (mut c1, p1) = install(
        &hand_written(),
        &vec![],
        &v1,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    c1.rules[0].when = "true".into();
    assert_eq!(drift(&p1[0], &c1).state.as_str(), "edited");
    let err = install(&c1, &p1, &v2, InstallRequest::default(), &catalog).unwrap_err();
    assert_eq!(
        err,
        MergeError::LocalEdits {
            pack: "drop-ci-noise".into(),
            rules: vec!["drop-ci-noise--a".into()]
        }
    );
    let find = |n: &str, v: &str| {
        catalog
            .iter()
            .find(|x| x.name == n && x.version == v)
            .cloned()
    };
    let req = InstallRequest {
        overwrite_local_edits: true,
        ..Default::default()
    };
    let c = install_candidate(&c1, &p1, &v2, &req, &find).unwrap();
    assert_eq!(
        c.rule_diff.changed,
        ["drop-ci-noise--a"],
        "the edit is replaced"
    );
    assert_eq!(c.rule_diff.added, ["drop-ci-noise--b"]);
    let vd = c.version_diff.unwrap();
    assert_eq!((vd.from.as_str(), vd.to.as_str()), ("1.0.0", "2.0.0"));
    assert_eq!(vd.rules_added, ["b"]);
    assert_eq!(vd.rules_changed, ["a"]);
    assert_eq!(
        ids(&c.configuration),
        ["drop-ci-noise--a", "drop-ci-noise--b", "mine-1", "mine-2"]
    );
}

#[test]
fn a_pack_another_installed_pack_requires_is_not_removed() {
    let ta = pack(json!({"name": "ta"}));
    let lanes = pack(json!({"name": "lanes", "requires": {"packs": ["ta"]}}));
    let catalog = vec![ta.clone(), lanes.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &ta,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    let (c2, p2) = install(&c1, &p1, &lanes, InstallRequest::default(), &catalog).unwrap();
    let err = removal_candidate(&c2, &p2, "ta", &[], &find_in(&catalog)).unwrap_err();
    assert_eq!(err.reason().as_str(), "required_by_pack");
    assert_eq!(
        err,
        MergeError::RequiredByPack {
            pack: "ta".into(),
            dependents: vec!["lanes".into()]
        }
    );
    assert!(err.to_string().contains("required by lanes"), "{err}");
    // The dependent goes first; then the required pack can go.
    let r = removal_candidate(&c2, &p2, "lanes", &[], &find_in(&catalog)).unwrap();
    let (c3, p3) = (r.configuration, r.provenance);
    removal_candidate(&c3, &p3, "ta", &[], &find_in(&catalog)).expect("nothing requires ta now");
}

#[test]
fn removal_takes_rules_default_and_params_only_this_pack_owns() {
    let a = pack(
        json!({"name": "ta", "params_schema": {"shared": {"type": "int", "default": 1, "description": "d"}, "own": {"type": "int", "default": 2, "description": "d"}}}),
    );
    let b = pack(
        json!({"name": "lanes", "default_action": {"drop": true}, "params_schema": {"shared": {"type": "int", "default": 1, "description": "d"}}}),
    );
    let catalog = vec![a.clone(), b.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &a,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    let (c2, p2) = install(&c1, &p1, &b, InstallRequest::default(), &catalog).unwrap();
    let r = removal_candidate(&c2, &p2, "lanes", &[], &find_in(&catalog)).unwrap();
    assert_eq!(ids(&r.configuration), ["ta--a", "mine-1", "mine-2"]);
    assert!(r.configuration.default_action.is_none());
    assert!(
        r.configuration.params.contains_key("shared"),
        "still owned by ta"
    );
    let r = removal_candidate(&c2, &p2, "ta", &[], &find_in(&catalog)).unwrap();
    assert!(!r.configuration.params.contains_key("own"));
    assert!(r.configuration.params.contains_key("shared"));
    assert_eq!(r.param_diff.removed, ["own"]);
    assert_eq!(
        removal_candidate(&c2, &p2, "nope", &[], &find_in(&catalog))
            .unwrap_err()
            .reason()
            .as_str(),
        "not_found"
    );
    let _: Vec<InstalledPack> = p2;
}

/// Issue 18 item 3: provenance alone is enough to remove a pack, keep its dependents' order
/// and refuse the removal of a pack another requires, with no manifest in the catalog.
#[test]
fn a_pack_whose_manifest_left_the_catalog_is_removed_from_its_provenance_alone() {
    let ta = pack(json!({"name": "ta", "placement": "append",
        "params_schema": {"own": {"type": "int", "default": 2, "description": "d"}}}));
    let lanes = pack(json!({"name": "lanes", "requires": {"packs": ["ta"]}}));
    let catalog = vec![ta.clone(), lanes.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &ta,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    let (c2, p2) = install(&c1, &p1, &lanes, InstallRequest::default(), &catalog).unwrap();
    let nothing = |_: &str, _: &str| None;
    // Both manifests gone: the requirement is still known, from provenance.
    let err = removal_candidate(&c2, &p2, "ta", &[], &nothing).unwrap_err();
    assert_eq!(err.reason().as_str(), "required_by_pack");
    let r = removal_candidate(&c2, &p2, "lanes", &[], &nothing).unwrap();
    assert_eq!(
        (r.pack_name.as_str(), r.pack_version.as_str()),
        ("lanes", "1.0.0")
    );
    assert_eq!(ids(&r.configuration), ["mine-1", "mine-2", "ta--a"]);
    let r = removal_candidate(&r.configuration, &r.provenance, "ta", &[], &nothing).unwrap();
    assert_eq!(ids(&r.configuration), ["mine-1", "mine-2"]);
    assert_eq!(r.param_diff.removed, ["own"]);
    assert_eq!(r.param_diff.orphaned, ["own"]);
    // Installing another pack keeps the manifest-less pack's block where its placement says.
    let other = pack(json!({"name": "other"}));
    let c = install_candidate(&c2, &p2, &other, &InstallRequest::default(), &nothing).unwrap();
    assert_eq!(
        ids(&c.configuration),
        ["lanes--a", "other--a", "mine-1", "mine-2", "ta--a"]
    );
}

/// Provenance written before requirements and placement were recorded reads them from the
/// manifest, and the next candidate records them.
#[test]
fn older_provenance_is_backfilled_from_the_manifest() {
    let ta = pack(json!({"name": "ta", "placement": "append"}));
    let lanes = pack(json!({"name": "lanes", "requires": {"packs": ["ta"]}}));
    let catalog = vec![ta.clone(), lanes.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &ta,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    let (c2, mut p2) = install(&c1, &p1, &lanes, InstallRequest::default(), &catalog).unwrap();
    for p in &mut p2 {
        p.requires = None;
        p.placement = None;
    }
    let old: Provenance = serde_json::from_value(serde_json::to_value(&p2).unwrap()).unwrap();
    assert_eq!(
        removal_candidate(&c2, &old, "ta", &[], &find_in(&catalog))
            .unwrap_err()
            .reason()
            .as_str(),
        "required_by_pack"
    );
    let other = pack(json!({"name": "other"}));
    let c = install_candidate(
        &c2,
        &old,
        &other,
        &InstallRequest::default(),
        &find_in(&catalog),
    )
    .unwrap();
    let recorded = c.provenance.iter().find(|p| p.name == "lanes").unwrap();
    assert_eq!(recorded.requires.as_ref().unwrap().packs, ["ta"]);
    let recorded = c.provenance.iter().find(|p| p.name == "ta").unwrap();
    assert_eq!(
        recorded.placement,
        Some(switchboard_packs::manifest::Placement::Append)
    );
}

/// Issue 18 item 10: an upgrade that stops declaring a param lists it as orphaned and removes
/// it unless kept; a param another installed pack owns is not orphaned.
#[test]
fn an_upgrade_removes_the_params_it_orphans_unless_kept() {
    let v1 = pack(json!({"name": "ta", "params_schema": {
        "gone": {"type": "bool", "default": true, "description": "d"},
        "shared": {"type": "string_list", "default": [], "description": "d"},
        "stays": {"type": "int", "default": 1, "description": "d"}}}));
    let mut v2 = pack(json!({"name": "ta", "params_schema": {
        "stays": {"type": "int", "default": 1, "description": "d"}}}));
    v2.version = "2.0.0".into();
    let lanes = pack(json!({"name": "lanes", "params_schema": {
        "shared": {"type": "string_list", "default": [], "description": "d"}}}));
    let catalog = vec![v1.clone(), v2.clone(), lanes.clone()];
    let (c1, p1) = install(
        &hand_written(),
        &vec![],
        &v1,
        InstallRequest::default(),
        &catalog,
    )
    .unwrap();
    // Without lanes both `gone` and `shared` are orphaned.
    let c = install_candidate(
        &c1,
        &p1,
        &v2,
        &InstallRequest::default(),
        &find_in(&catalog),
    )
    .unwrap();
    assert_eq!(c.param_diff.orphaned, ["gone", "shared"]);
    assert_eq!(c.param_diff.removed, ["gone", "shared"]);
    assert!(!c.configuration.params.contains_key("gone"));
    assert_eq!(c.configuration.params["stays"], json!(1));
    assert_eq!(
        c.configuration.params["mine"],
        json!(1),
        "hand-written params stay"
    );
    let keep = InstallRequest {
        keep_params: vec!["gone".into()],
        ..Default::default()
    };
    let c = install_candidate(&c1, &p1, &v2, &keep, &find_in(&catalog)).unwrap();
    assert_eq!(c.param_diff.kept, ["gone"]);
    assert_eq!(c.param_diff.removed, ["shared"]);
    assert_eq!(c.configuration.params["gone"], json!(true));
    // With lanes installed, `shared` still has an owner.
    let (c2, p2) = install(&c1, &p1, &lanes, InstallRequest::default(), &catalog).unwrap();
    let c = install_candidate(
        &c2,
        &p2,
        &v2,
        &InstallRequest::default(),
        &find_in(&catalog),
    )
    .unwrap();
    assert_eq!(c.param_diff.orphaned, ["gone"]);
    assert!(c.configuration.params.contains_key("shared"));
    // Keeping a param the change does not orphan is refused, naming it.
    let stray = InstallRequest {
        keep_params: vec!["stays".into()],
        ..Default::default()
    };
    let err = install_candidate(&c2, &p2, &v2, &stray, &find_in(&catalog)).unwrap_err();
    assert_eq!(err.reason().as_str(), "invalid_argument");
    assert!(err.to_string().contains("stays is not a param"), "{err}");
    // A removal keeps what it is asked to keep.
    let r = removal_candidate(&c2, &p2, "lanes", &[], &find_in(&catalog)).unwrap();
    assert!(r.param_diff.orphaned.is_empty(), "ta still owns shared");
    let r = removal_candidate(&c1, &p1, "ta", &["stays".into()], &find_in(&catalog)).unwrap();
    assert_eq!(r.param_diff.kept, ["stays"]);
    assert_eq!(r.param_diff.removed, ["gone", "shared"]);
    assert_eq!(r.configuration.params["stays"], json!(1));
}
