//! Properties of a trial's evidence (issue 45): a trial whose live deliveries make each
//! transition at the rate its replay forecast is never flagged, however the sizes go; one the
//! replay never saw always is.

use std::collections::BTreeMap;

use proptest::prelude::*;
use switchboard_model::Label;
use switchboard_model::trial::{Forecast, Observed, compare};

fn moves() -> Vec<(Label<'static>, Label<'static>)> {
    vec![
        (Label::queue("forge").into_owned(), Label::Drop),
        (Label::Default, Label::queue("ci").into_owned()),
        (Label::queue("ci").into_owned(), Label::Quarantine),
    ]
}

proptest! {
    /// The trial sees `scale` times the replay's deliveries, each transition `scale` times as
    /// often: every rate equal, nothing outside, nothing unforeseen or unobserved.
    #[test]
    fn a_trial_at_the_forecast_rates_is_never_flagged(
        counts in proptest::collection::vec(0u64..200, 3),
        rest in 1u64..2000,
        scale in 1u64..20,
    ) {
        let mut forecast = Forecast { deliveries: rest, ..Default::default() };
        let mut observed = Observed::default();
        for (mv, k) in moves().into_iter().zip(&counts) {
            forecast.deliveries += k;
            if *k > 0 {
                forecast.transitions.insert(mv.clone(), *k);
                observed.transitions.insert(mv, k * scale);
            }
        }
        observed.evaluated = forecast.deliveries * scale;
        observed.seen = observed.evaluated;
        for e in compare(&forecast, &observed) {
            prop_assert!(!e.outside && !e.unforeseen && !e.unobserved, "{e:?}");
            prop_assert!((e.forecast_rate - e.observed_rate).abs() < 1e-9);
            prop_assert!(e.interval[0] <= e.forecast_rate && e.forecast_rate <= e.interval[1]);
        }
    }

    /// A transition the replay never saw is flagged unforeseen whenever the trial sees it,
    /// and lost work is listed before anything else.
    #[test]
    fn an_unforeseen_transition_is_always_flagged_and_lost_work_comes_first(
        seen in 1u64..500,
        replayed in 1u64..5000,
        evaluated_extra in 0u64..5000,
    ) {
        let forecast = Forecast {
            deliveries: replayed,
            transitions: BTreeMap::from([((Label::Default, Label::queue("x").into_owned()), replayed / 2 + 1)]),
        };
        let observed = Observed {
            seen: seen + evaluated_extra,
            evaluated: seen + evaluated_extra,
            transitions: BTreeMap::from([
                ((Label::queue("forge").into_owned(), Label::Drop), seen),
                ((Label::Default, Label::queue("x").into_owned()), evaluated_extra / 2),
            ]),
            ..Observed::default()
        };
        let evidence = compare(&forecast, &observed);
        prop_assert!(evidence[0].loses_work && evidence[0].unforeseen);
        let lost_first = evidence.iter().skip_while(|e| e.loses_work).all(|e| !e.loses_work);
        prop_assert!(lost_first);
    }
}
