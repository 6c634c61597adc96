//! Which queued chunk a free sandbox child runs next (docs/sandbox.md, "Classes and
//! shares"): live work before interactive work before replays, and within a class the
//! tenants take turns, one chunk each, so one tenant's 1,000-delivery replay alternates with
//! another's instead of queueing ahead of it. Pure: the pool holds it under its lock.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use switchboard_proto::router::v1::WorkClass;

/// How urgent a piece of work is, most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Deliveries a forge waits on.
    Live,
    /// A person or agent waits on it: dry runs, fixtures, param checks, validations.
    Interactive,
    /// Replays over stored deliveries: they yield to the others at chunk boundaries.
    Replay,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Live, Class::Interactive, Class::Replay];

    /// The class a request asks for; a caller that names none is served as interactive.
    pub fn from_wire(class: i32) -> Self {
        match WorkClass::try_from(class) {
            Ok(WorkClass::Live) => Class::Live,
            Ok(WorkClass::Replay) => Class::Replay,
            _ => Class::Interactive,
        }
    }

    /// The metric and log label.
    pub fn label(self) -> &'static str {
        match self {
            Class::Live => "live",
            Class::Interactive => "interactive",
            Class::Replay => "replay",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the schedule needs to know of a queued item.
pub trait Queued {
    fn class(&self) -> Class;
    fn tenant(&self) -> &str;
    /// Nobody waits for it any more: dropped when its turn comes, never run.
    fn abandoned(&self) -> bool;
}

/// One tenant's place in a class's turn order, with its items oldest first.
struct Line<T> {
    tenant: String,
    items: VecDeque<T>,
}

/// Queued items by class, each class a round of tenants, with the CPU each tenant's work of
/// the class has used while it competed ([`Schedule::charge`]).
pub struct Schedule<T> {
    classes: [VecDeque<Line<T>>; 3],
    len: [usize; 3],
    used: [HashMap<String, Duration>; 3],
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            classes: Default::default(),
            len: [0; 3],
            used: Default::default(),
        }
    }
}

impl<T: Queued> Schedule<T> {
    /// Queues `item` at the back of its tenant's line; a tenant not queued yet joins the end
    /// of its class's round, counted as having used no less than the least-served tenant
    /// queued (a newcomer is not owed the time it was away).
    pub fn push(&mut self, item: T) {
        let class = item.class().index();
        let lines = &mut self.classes[class];
        match lines.iter_mut().find(|l| l.tenant == item.tenant()) {
            Some(line) => line.items.push_back(item),
            None => {
                self.joins(class, item.tenant());
                self.classes[class].push_back(Line {
                    tenant: item.tenant().to_string(),
                    items: VecDeque::from([item]),
                });
            }
        }
        self.len[class] += 1;
    }

    /// Puts `item` back at the head of its tenant's line, and that tenant first in its
    /// class's round: work a failed child left undone keeps the turn it had.
    pub fn push_front(&mut self, item: T) {
        let class = item.class().index();
        let lines = &mut self.classes[class];
        let mut line = match lines.iter().position(|l| l.tenant == item.tenant()) {
            Some(i) => lines.remove(i).unwrap_or_else(|| Line {
                tenant: item.tenant().to_string(),
                items: VecDeque::new(),
            }),
            None => {
                self.joins(class, item.tenant());
                Line {
                    tenant: item.tenant().to_string(),
                    items: VecDeque::new(),
                }
            }
        };
        line.items.push_front(item);
        self.classes[class].push_front(line);
        self.len[class] += 1;
    }

    /// A tenant's line is made: it starts no further behind than the least-served queued.
    fn joins(&mut self, class: usize, tenant: &str) {
        let floor = self.classes[class]
            .iter()
            .filter_map(|l| self.used[class].get(&l.tenant))
            .min()
            .copied()
            .unwrap_or_default();
        let used = self.used[class].entry(tenant.to_string()).or_default();
        *used = (*used).max(floor);
    }

    /// `spent` of CPU went to `tenant`'s work of `class`: its turns come less often while it
    /// has used more than the others (fair queuing by CPU, so a tenant whose every slice is
    /// one long delivery does not get more than one whose slices are short).
    pub fn charge(&mut self, class: Class, tenant: &str, spent: Duration) {
        if let Some(used) = self.used[class.index()].get_mut(tenant) {
            *used += spent;
        }
    }

    /// The next item of the most urgent class `allowed` admits: from the tenant that has used
    /// the least CPU in that class (the first of them in the round when several have), which
    /// gives its oldest item and goes to the end of the round. Abandoned items met on the way
    /// are dropped.
    pub fn take(&mut self, allowed: impl Fn(Class) -> bool) -> Option<T> {
        for class in Class::ALL {
            if !allowed(class) {
                continue;
            }
            let c = class.index();
            loop {
                let used = &self.used[c];
                let Some(i) = self.classes[c]
                    .iter()
                    .enumerate()
                    .min_by_key(|(i, l)| (used.get(&l.tenant).copied().unwrap_or_default(), *i))
                    .map(|(i, _)| i)
                else {
                    break;
                };
                let Some(mut line) = self.classes[c].remove(i) else {
                    break;
                };
                let mut found = None;
                while let Some(item) = line.items.pop_front() {
                    self.len[c] -= 1;
                    if !item.abandoned() {
                        found = Some(item);
                        break;
                    }
                }
                if !line.items.is_empty() {
                    self.classes[c].push_back(line);
                }
                if self.classes[c].is_empty() {
                    // Nobody competes: what each used no longer matters.
                    self.used[c].clear();
                }
                if found.is_some() {
                    return found;
                }
            }
        }
        None
    }

    /// Items queued (abandoned ones included until their turn).
    pub fn len(&self) -> usize {
        self.len.iter().sum()
    }

    /// Items queued of a class `which` admits.
    pub fn len_of(&self, which: impl Fn(Class) -> bool) -> usize {
        Class::ALL
            .iter()
            .filter(|c| which(**c))
            .map(|c| self.len[c.index()])
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Item {
        class: Class,
        tenant: &'static str,
        n: u32,
        gone: bool,
    }

    impl Queued for Item {
        fn class(&self) -> Class {
            self.class
        }
        fn tenant(&self) -> &str {
            self.tenant
        }
        fn abandoned(&self) -> bool {
            self.gone
        }
    }

    fn item(class: Class, tenant: &'static str, n: u32) -> Item {
        Item {
            class,
            tenant,
            n,
            gone: false,
        }
    }

    fn drain(s: &mut Schedule<Item>) -> Vec<(&'static str, u32)> {
        std::iter::from_fn(|| s.take(|_| true))
            .map(|i| (i.tenant, i.n))
            .collect()
    }

    #[test]
    fn live_work_comes_before_interactive_work_before_replays() {
        let mut s = Schedule::default();
        s.push(item(Class::Replay, "a", 1));
        s.push(item(Class::Interactive, "a", 2));
        s.push(item(Class::Live, "b", 3));
        s.push(item(Class::Replay, "a", 4));
        s.push(item(Class::Live, "a", 5));
        assert_eq!(s.len(), 5);
        assert_eq!(s.len_of(|c| c != Class::Replay), 3);
        assert_eq!(
            drain(&mut s),
            [("b", 3), ("a", 5), ("a", 2), ("a", 1), ("a", 4)]
        );
        assert!(s.is_empty());
    }

    #[test]
    fn tenants_take_turns_within_a_class() {
        let mut s = Schedule::default();
        // A queues a long replay first; B's short one still runs every other chunk.
        for n in 0..5 {
            s.push(item(Class::Replay, "a", n));
        }
        s.push(item(Class::Replay, "b", 10));
        s.push(item(Class::Replay, "b", 11));
        s.push(item(Class::Replay, "c", 20));
        assert_eq!(
            drain(&mut s),
            [
                ("a", 0),
                ("b", 10),
                ("c", 20),
                ("a", 1),
                ("b", 11),
                ("a", 2),
                ("a", 3),
                ("a", 4)
            ]
        );
    }

    #[test]
    fn work_put_back_keeps_its_turn_and_abandoned_work_is_dropped() {
        let mut s = Schedule::default();
        s.push(item(Class::Replay, "a", 1));
        s.push(item(Class::Replay, "b", 2));
        let taken = s.take(|_| true).expect("a's");
        assert_eq!(taken.n, 1);
        s.push(item(Class::Replay, "a", 3));
        // A's chunk failed on its child: it goes first again, ahead of A's next.
        s.push_front(taken);
        s.push(Item {
            gone: true,
            ..item(Class::Replay, "c", 4)
        });
        assert_eq!(s.len(), 4);
        assert_eq!(drain(&mut s), [("a", 1), ("b", 2), ("a", 3)]);
        assert_eq!(s.len(), 0, "the abandoned item was counted out");
    }

    #[test]
    fn a_filter_skips_the_classes_it_does_not_admit() {
        let mut s = Schedule::default();
        s.push(item(Class::Replay, "a", 1));
        assert!(s.take(|c| c != Class::Replay).is_none());
        s.push(item(Class::Interactive, "a", 2));
        assert_eq!(s.take(|c| c != Class::Replay).map(|i| i.n), Some(2));
        assert_eq!(s.take(|c| c == Class::Replay).map(|i| i.n), Some(1));
    }

    #[test]
    fn a_tenant_whose_slices_cost_more_gets_turns_less_often() {
        let mut s = Schedule::default();
        for n in 0..6 {
            s.push(item(Class::Replay, "a", n));
            s.push(item(Class::Replay, "b", 10 + n));
        }
        let ms = Duration::from_millis;
        let mut order = Vec::new();
        for _ in 0..8 {
            let i = s.take(|_| true).expect("queued");
            // A's slices are one 60 ms delivery each, B's 20 ms.
            let spent = if i.tenant == "a" { ms(60) } else { ms(20) };
            s.charge(Class::Replay, i.tenant, spent);
            order.push(i.tenant);
        }
        assert_eq!(order, ["a", "b", "b", "b", "a", "b", "b", "b"]);
    }

    #[test]
    fn a_newcomer_is_not_owed_the_time_it_was_away() {
        let mut s = Schedule::default();
        s.push(item(Class::Replay, "a", 1));
        s.push(item(Class::Replay, "a", 2));
        s.push(item(Class::Replay, "a", 3));
        let first = s.take(|_| true).expect("a's");
        s.charge(Class::Replay, first.tenant, Duration::from_secs(5));
        // B arrives after A used five seconds: it starts level with A, not five seconds ahead.
        s.push(item(Class::Replay, "b", 10));
        s.push(item(Class::Replay, "b", 11));
        let order: Vec<_> = std::iter::from_fn(|| s.take(|_| true))
            .map(|i| (i.tenant, i.n))
            .collect();
        assert_eq!(order, [("a", 2), ("b", 10), ("a", 3), ("b", 11)]);
    }

    #[test]
    fn an_unnamed_class_is_interactive() {
        assert_eq!(Class::from_wire(0), Class::Interactive);
        assert_eq!(Class::from_wire(WorkClass::Live as i32), Class::Live);
        assert_eq!(Class::from_wire(WorkClass::Replay as i32), Class::Replay);
        assert_eq!(Class::from_wire(99), Class::Interactive);
    }
}
