//! Where a store is: the one parser of the `--artifacts URL` every command
//! takes. `file:///absolute/path` is a local directory (the default, a
//! cohort's own `DIR/.cohort/artifacts`, needs no URL); `s3://bucket/prefix`
//! is an S3-compatible bucket (endpoint, region and credentials from the
//! standard AWS variables, never from the URL, so the URL can be printed
//! and passed on to child processes without leaking a secret).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// What to write instead of a URL this module cannot read: the tail of
/// every [`LocationError`].
pub const URL_FORMS: &str = "write file:///absolute/path for a directory, or s3://bucket/prefix for an S3-compatible \
                             bucket (endpoint, region and credentials from the AWS_* variables)";

/// The location of an artifact store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactsUrl {
    /// A local directory (absolute).
    Local(PathBuf),
    /// A bucket of an S3-compatible service; blobs under `PREFIX/sha256/ab/...`
    /// (`prefix` without leading or trailing `/`, possibly empty).
    S3 { bucket: String, prefix: String },
}

/// A URL that names no store this build can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not an artifact store URL: {reason}; {URL_FORMS}")]
pub struct LocationError {
    pub given: String,
    pub reason: String,
}

impl ArtifactsUrl {
    /// Reads `file:///abs/path` or `s3://bucket[/prefix]`.
    pub fn parse(given: &str) -> Result<ArtifactsUrl, LocationError> {
        let bad = |reason: &str| LocationError { given: given.to_owned(), reason: reason.to_owned() };
        let Some((scheme, rest)) = given.split_once("://") else {
            return Err(bad("it has no scheme (a bare path is not accepted, so a typo cannot become a new folder)"));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                // `file:///abs` only: `file://host/...` names another machine,
                // and a relative path would depend on the working directory.
                if !rest.starts_with('/') {
                    return Err(bad("a file URL needs an absolute path after file:// (three slashes in all)"));
                }
                if rest.contains(['?', '#']) {
                    return Err(bad("a file URL takes no query or fragment"));
                }
                Ok(ArtifactsUrl::Local(PathBuf::from(rest)))
            }
            "s3" => {
                if rest.contains(['?', '#', '@']) {
                    return Err(bad(
                        "an s3 URL takes no query, fragment or credentials (credentials come from AWS_ACCESS_KEY_ID \
                         and AWS_SECRET_ACCESS_KEY or the AWS credentials file)",
                    ));
                }
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if !is_bucket_name(bucket) {
                    return Err(bad(
                        "the bucket name must be 3 to 63 lowercase letters, digits, dots and hyphens, starting and \
                         ending with a letter or digit",
                    ));
                }
                let prefix = prefix.trim_matches('/');
                if !prefix.is_empty() && prefix.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
                    return Err(bad("the prefix has an empty, `.` or `..` segment"));
                }
                Ok(ArtifactsUrl::S3 { bucket: bucket.to_owned(), prefix: prefix.to_owned() })
            }
            other => Err(bad(&format!("the scheme {other:?} is not supported"))),
        }
    }
}

/// S3's bucket naming rules (the subset that matters for a URL: length,
/// characters, first and last character).
fn is_bucket_name(name: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name.chars().all(ok_char)
        && alnum(name.chars().next())
        && alnum(name.chars().last())
}

impl FromStr for ArtifactsUrl {
    type Err = LocationError;

    fn from_str(s: &str) -> Result<ArtifactsUrl, LocationError> {
        ArtifactsUrl::parse(s)
    }
}

/// The URL again (what [`ArtifactsUrl::parse`] reads back to the same value):
/// it holds no secret, so it is fit for logs and child command lines.
impl fmt::Display for ArtifactsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArtifactsUrl::Local(path) => write!(f, "file://{}", path.display()),
            ArtifactsUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            ArtifactsUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> ArtifactsUrl {
        ArtifactsUrl::S3 { bucket: bucket.into(), prefix: prefix.into() }
    }

    #[test]
    fn reads_file_and_s3_urls_and_writes_them_back() {
        let cases = [
            ("file:///var/cohort/artifacts", ArtifactsUrl::Local("/var/cohort/artifacts".into())),
            ("FILE:///tmp/a", ArtifactsUrl::Local("/tmp/a".into())),
            ("s3://results", s3("results", "")),
            ("s3://results/", s3("results", "")),
            ("s3://my.bucket-1/cohorts/2026/", s3("my.bucket-1", "cohorts/2026")),
        ];
        for (given, want) in cases {
            let got = ArtifactsUrl::parse(given).unwrap();
            assert_eq!(got, want, "{given}");
            assert_eq!(ArtifactsUrl::parse(&got.to_string()).unwrap(), want, "round trip of {given}");
        }
    }

    #[test]
    fn refuses_what_names_no_store_and_says_what_to_write() {
        let cases = [
            ("/var/cohort/artifacts", "no scheme"),
            ("artifacts", "no scheme"),
            ("file://host/path", "absolute path"),
            ("file://relative", "absolute path"),
            ("s3://AB", "bucket name"),
            ("s3://", "bucket name"),
            ("s3://-bucket/x", "bucket name"),
            ("s3://key:secret@bucket/x", "credentials"),
            ("s3://bucket/x?region=eu", "no query"),
            ("s3://bucket/a//b", "segment"),
            ("s3://bucket/a/../b", "segment"),
            ("gs://bucket/x", "\"gs\" is not supported"),
            ("https://example.com/b", "\"https\" is not supported"),
        ];
        for (given, reason) in cases {
            let e = ArtifactsUrl::parse(given).unwrap_err().to_string();
            assert!(e.contains(reason), "{given}: {e}");
            assert!(e.contains("file:///absolute/path") && e.contains("s3://bucket/prefix"), "{given}: {e}");
        }
    }
}
