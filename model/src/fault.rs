//! Fault codes a decision can carry: one definition for the router that sets them and for
//! control, which reads them (a stopped replay, a fault recorded at ingest).

/// The rule's first output was not a boolean/null, or it raised an error.
pub const RULE_FAULT: &str = "rule_fault";
/// The matched action routes to a queue outside the webhook's grant.
pub const NOT_GRANTED: &str = "not_granted";
/// The matched action needs a capability this instance lacks.
pub const CAPABILITY_MISSING: &str = "capability_missing";
/// The envelope's evaluation spent its per-event budget of CPU time; the child was replaced.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";
/// The sandbox child crashed while evaluating the envelope; it was replaced.
pub const SANDBOX_CRASHED: &str = "sandbox_crashed";
/// The configuration does not validate, so nothing in it can decide.
pub const INVALID_CONFIGURATION: &str = "invalid_configuration";
/// The call stopped at its `max_child_faults` before this unit ran: no rule is to blame,
/// and the unit says nothing about the delivery.
pub const NOT_EVALUATED: &str = "not_evaluated";
