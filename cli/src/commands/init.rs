//! `cohort init DIR --template NAME`: a new cohort directory from one of
//! the examples shipped in the binary.

use std::fs;
use std::path::Path;

use anyhow::Context as _;

/// The templates, embedded from `examples/` at build time.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Template {
    Quickstart,
    #[value(name = "protocol-v1")]
    ProtocolV1,
}

macro_rules! example_files {
    ($dir:literal) => {
        [
            ("cohort.toml", include_str!(concat!("../../../examples/", $dir, "/cohort.toml"))),
            ("questions.json", include_str!(concat!("../../../examples/", $dir, "/questions.json"))),
            ("suffix.txt", include_str!(concat!("../../../examples/", $dir, "/suffix.txt"))),
            ("protocol.md", include_str!(concat!("../../../examples/", $dir, "/protocol.md"))),
            ("rubric.md", include_str!(concat!("../../../examples/", $dir, "/rubric.md"))),
        ]
    };
}

pub fn run(dir: &Path, template: Template) -> anyhow::Result<()> {
    let files = match template {
        Template::Quickstart => example_files!("quickstart"),
        Template::ProtocolV1 => example_files!("protocol-v1"),
    };
    fs::create_dir(dir).with_context(|| format!("cannot create {} (it must not exist yet)", dir.display()))?;
    for (name, text) in files {
        fs::write(dir.join(name), text).with_context(|| format!("cannot write {}", dir.join(name).display()))?;
    }
    super::emit(&format!(
        "created {} from the {template:?} template\nedit it, then freeze it before any run:  cohort freeze {}\n",
        dir.display(),
        dir.display()
    ));
    Ok(())
}
