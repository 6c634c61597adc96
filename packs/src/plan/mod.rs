//! The plan (REQ-3…REQ-5) made: the replay's evidence and its aggregation into a report,
//! and the kind of an install. The plan's types are the model's
//! ([`switchboard_model::plan`]), re-exported here for control.

mod aggregate;
mod evidence;

pub use aggregate::*;
pub use evidence::{Delivered, Evidence, Unpaired, routed};
pub use switchboard_model::plan::*;

/// Installing `to` over the version installed now (`installed`, if any), by semver; an
/// installed version that does not parse counts as older.
pub fn plan_kind_of_install(installed: Option<&str>, to: &semver::Version) -> PlanKind {
    let Some(installed) = installed else {
        return PlanKind::Install;
    };
    match semver::Version::parse(installed) {
        Ok(f) if f == *to => PlanKind::Reinstall,
        Ok(f) if f > *to => PlanKind::Downgrade,
        _ => PlanKind::Upgrade,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_of_an_install_follows_semver() {
        let v = |s: &str| semver::Version::parse(s).expect("semver");
        assert_eq!(plan_kind_of_install(None, &v("1.0.0")), PlanKind::Install);
        assert_eq!(
            plan_kind_of_install(Some("1.0.0"), &v("2.0.0")),
            PlanKind::Upgrade
        );
        assert_eq!(
            plan_kind_of_install(Some("2.0.0"), &v("1.0.0")),
            PlanKind::Downgrade
        );
        assert_eq!(
            plan_kind_of_install(Some("1.0.0"), &v("1.0.0")),
            PlanKind::Reinstall
        );
        assert_eq!(
            plan_kind_of_install(Some("odd"), &v("1.0.0")),
            PlanKind::Upgrade
        );
        assert_eq!(PlanKind::Remove.verb(), "remove_rule_pack");
    }
}
