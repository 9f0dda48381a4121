//! Time, injected: the coordinator asks a [`Clock`] for "now", so tests
//! drive the collection window and lease expiry with a [`ManualClock`]
//! instead of sleeping. The clock lives in `cohort-clock` (the worker uses
//! it too, without depending on the coordinator); this module re-exports
//! it so `cohort_coordinator::clock::*` paths keep working.

pub use cohort_clock::{Clock, ManualClock, SystemClock, now_ms};
