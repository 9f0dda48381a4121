//! What the CLI's integration tests share.

use std::fs;
use std::path::Path;

/// The five cohort files of the shipped `examples/NAME`, copied into `to`
/// (created); a developer's local run state stays out.
pub fn copy_example(name: &str, to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
    fs::create_dir_all(to).unwrap();
    for file in ["cohort.toml", "questions.json", "suffix.txt", "protocol.md", "rubric.md"] {
        fs::copy(from.join(file), to.join(file)).unwrap();
    }
}
