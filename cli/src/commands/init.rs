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
    let files: Vec<(&str, &str)> = match template {
        Template::Quickstart => example_files!("quickstart").to_vec(),
        // protocol-v1 declares [review], so it ships its (draft) uncertainty
        // key, which freezing it then requires.
        Template::ProtocolV1 => {
            let mut files = example_files!("protocol-v1").to_vec();
            files.push(("uncertainty_key.json", include_str!("../../../examples/protocol-v1/uncertainty_key.json")));
            files
        }
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
