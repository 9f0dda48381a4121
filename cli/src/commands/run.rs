//! `cohort run DIR`: freeze the cohort if needed, then run it.
//!
//! Running needs the coordinator, workers and ledger, which are not built
//! yet: for now this freezes (or verifies) the cohort, prints the planned
//! order, and says plainly that no run was executed.

use std::path::Path;

use cohort_coordinator::freeze::read_manifest;
use cohort_core::manifest;

pub fn run(dir: &Path) -> anyhow::Result<()> {
    let was_frozen = read_manifest(&dir.join(manifest::FILE))?.is_some();
    super::freeze::run(dir, None, 20)?;
    let mut out = String::new();
    if !was_frozen {
        out.push_str("(the cohort was not frozen yet, so `cohort run` froze it first)\n");
    }
    out.push_str("\nnothing was run: executing runs (coordinator, workers, ledger) is not built yet.\n");
    out.push_str("the plan above is final: when execution lands, it runs exactly this order.\n");
    super::emit(&out);
    Ok(())
}
