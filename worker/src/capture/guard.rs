//! Which URLs the capturer may fetch: http(s) only, never a reserved
//! domain, and (unless allowed) never a loopback, private, link-local or
//! otherwise non-public address (SSRF guard).
//!
//! The address check happens where the connection is made, not only on the
//! URL: [`GuardedResolver`] is reqwest's DNS resolver, so every hop of a
//! redirect chain is checked, and the addresses it returns are the ones the
//! connector dials (no time-of-check/time-of-use gap for DNS rebinding).
//! Hosts written as literal IPs never reach a resolver; they are checked by
//! [`check_url`], which runs on the first URL and, through the redirect
//! policy, on every redirect target.
//!
//! Known limit: a public host whose connection is redirected at the network
//! level (a transparent proxy) is out of reach of any client-side check.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Why a URL is not fetched. Carried through reqwest's error chain (from
/// the resolver and the redirect policy) and found again by downcasting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not `http` or `https`.
    Scheme(String),
    /// A reserved name that never resolves (RFC 2606, RFC 6761, RFC 7686).
    ReservedDomain(String),
    /// The host is, or resolves only to, non-public addresses.
    PrivateAddress { host: String, address: Option<IpAddr> },
    /// The redirect chain is longer than allowed.
    TooManyRedirects(usize),
    /// The URL has no host.
    NoHost,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Scheme(s) => write!(f, "invalid url: unsupported scheme {s:?} (only http and https)"),
            Refusal::ReservedDomain(_) => f.write_str("reserved domain (RFC 2606): never resolvable"),
            Refusal::PrivateAddress { host, address: Some(a) } if host != &a.to_string() => {
                write!(f, "not allowed (private address): {host} resolves to {a}")
            }
            Refusal::PrivateAddress { host, .. } => write!(f, "not allowed (private address): {host}"),
            Refusal::TooManyRedirects(n) => write!(f, "too many redirects (more than {n})"),
            Refusal::NoHost => f.write_str("invalid url: no host"),
        }
    }
}

impl std::error::Error for Refusal {}

/// The DNS failure of a host (no address, or the lookup failed).
#[derive(Debug)]
pub struct DnsFailure(pub String);

impl fmt::Display for DnsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dns: {}", self.0)
    }
}

impl std::error::Error for DnsFailure {}

/// Top-level names that never resolve on the public DNS: `.invalid`,
/// `.example` and `.test` (RFC 2606), names under `.localhost` (RFC 6761;
/// plain `localhost` is loopback and handled as such) and `.onion`
/// (RFC 7686: reachable only through Tor).
const RESERVED_TLDS: &[&str] = &["invalid", "example", "test", "localhost", "onion"];

/// Checks a URL before any connection: scheme, host, reserved names and,
/// unless `allow_private`, literal non-public IPs and `localhost`.
pub fn check_url(url: &Url, allow_private: bool) -> Result<(), Refusal> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refusal::Scheme(url.scheme().to_owned()));
    }
    match url.host() {
        None => Err(Refusal::NoHost),
        Some(Host::Domain(domain)) => {
            let name = domain.trim_end_matches('.').to_ascii_lowercase();
            let tld = name.rsplit('.').next().unwrap_or("");
            let reserved_tld = name.contains('.') && RESERVED_TLDS.contains(&tld);
            if reserved_tld || matches!(name.as_str(), "invalid" | "example" | "test" | "onion") {
                return Err(Refusal::ReservedDomain(name));
            }
            if !allow_private && name == "localhost" {
                return Err(Refusal::PrivateAddress { host: name, address: None });
            }
            Ok(())
        }
        Some(Host::Ipv4(ip)) => check_ip(&ip.to_string(), IpAddr::V4(ip), allow_private),
        Some(Host::Ipv6(ip)) => check_ip(&ip.to_string(), IpAddr::V6(ip), allow_private),
    }
}

fn check_ip(host: &str, ip: IpAddr, allow_private: bool) -> Result<(), Refusal> {
    if allow_private || is_public(ip) {
        Ok(())
    } else {
        Err(Refusal::PrivateAddress { host: host.to_owned(), address: Some(ip) })
    }
}

/// Whether `ip` is a globally reachable unicast address: not loopback,
/// private (RFC 1918, unique local), link-local, shared (CGNAT), unspecified,
/// broadcast, multicast, documentation, benchmarking or reserved. IPv6
/// addresses that embed an IPv4 one (mapped, translated, NAT64, 6to4,
/// Teredo) are judged by it, and the local-use NAT64 prefix is never
/// public.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            let v4 = |hi: u16, lo: u16| {
                let ([a, b], [c, d]) = (hi.to_be_bytes(), lo.to_be_bytes());
                Ipv4Addr::new(a, b, c, d)
            };
            // NAT64 well-known prefix 64:ff9b::/96 embeds an IPv4 address.
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return is_public_v4(v4(s[6], s[7]));
            }
            // The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) is never
            // global, whatever it embeds (its IPv4 position depends on the
            // operator's prefix length).
            if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
                return false;
            }
            // IPv4-translated ::ffff:0:a.b.c.d (RFC 2765).
            if s[0..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0 {
                return is_public_v4(v4(s[6], s[7]));
            }
            // 6to4 2002:AABB:CCDD::/48 (RFC 3056) embeds a.b.c.d.
            if s[0] == 0x2002 {
                return is_public_v4(v4(s[1], s[2]));
            }
            // Teredo 2001:0::/32 (RFC 4380): the server's IPv4 address in
            // clear, the client's inverted; both must be public.
            if s[0] == 0x2001 && s[1] == 0 {
                return is_public_v4(v4(s[2], s[3])) && is_public_v4(v4(!s[6], !s[7]));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // deprecated site-local fec0::/10
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0 && s[1..6] == [0, 0, 0, 0, 0])) // IPv4-compatible, deprecated
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240) // reserved
}

/// reqwest's resolver for the capturer: tokio's `lookup_host` (the system
/// resolver), then, unless private addresses are allowed, only the public
/// addresses are handed to the connector; a host with none is refused.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts in the URL's port (or the scheme's).
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| Box::new(DnsFailure(format!("{host}: {e}"))) as Box<dyn std::error::Error + Send + Sync>)?
                .collect();
            if found.is_empty() {
                return Err(
                    Box::new(DnsFailure(format!("{host}: no address"))) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            let usable: Vec<SocketAddr> =
                found.iter().copied().filter(|a| allow_private || is_public(a.ip())).collect();
            if usable.is_empty() {
                let address = found.first().map(SocketAddr::ip);
                return Err(
                    Box::new(Refusal::PrivateAddress { host, address }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(usable.into_iter()) as Addrs)
        })
    }
}

/// The redirect policy: at most `max` redirects, each target passing
/// [`check_url`] (a public page redirecting to `http://127.0.0.1/` is
/// refused like the literal URL would be).
pub fn redirect_policy(max: usize, allow_private: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` holds the first URL and every redirect already followed.
        if attempt.previous().len() > max {
            return attempt.error(Refusal::TooManyRedirects(max));
        }
        match check_url(attempt.url(), allow_private) {
            Ok(()) => attempt.follow(),
            Err(refusal) => attempt.error(refusal),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn check(url: &str, allow: bool) -> Result<(), Refusal> {
        check_url(&Url::parse(url).map_err(|_| Refusal::NoHost)?, allow)
    }

    /// Reserved names are refused whatever the private-address setting.
    #[test]
    fn reserved_domains_are_refused() {
        for url in [
            "https://sim.cohort.invalid/x",
            "http://a.example/",
            "http://x.test",
            "http://foo.localhost/",
            "http://abc.onion/",
            "http://invalid./",
        ] {
            assert!(matches!(check(url, true), Err(Refusal::ReservedDomain(_))), "{url}");
        }
        assert!(check("https://example.com/", false).is_ok());
        assert!(check("https://testing.org/", false).is_ok());
    }

    /// Loopback, private and link-local literals and `localhost` are refused
    /// unless allowed; public ones pass.
    #[test]
    fn private_literals_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:8080/",
            "http://localhost/",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fd00::1]/",
            "http://0.0.0.0/",
            "http://100.64.0.1/",
        ] {
            assert!(matches!(check(url, false), Err(Refusal::PrivateAddress { .. })), "{url}");
            assert!(check(url, true).is_ok(), "{url}");
        }
        assert!(check("http://93.184.216.34/", false).is_ok());
        assert!(check("http://[2606:4700::1111]/", false).is_ok());
    }

    /// Only http and https.
    #[test]
    fn other_schemes_are_refused() {
        for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://x.org/", "data:text/plain,hi"] {
            assert!(check(url, true).is_err(), "{url}");
        }
    }

    /// The messages name the reason the report will show.
    #[test]
    fn messages_say_why() {
        assert_eq!(
            Refusal::ReservedDomain("a.invalid".into()).to_string(),
            "reserved domain (RFC 2606): never resolvable"
        );
        assert!(Refusal::TooManyRedirects(5).to_string().starts_with("too many redirects"));
        let p = Refusal::PrivateAddress {
            host: "intranet.corp".into(),
            address: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
        };
        assert_eq!(p.to_string(), "not allowed (private address): intranet.corp resolves to 10.0.0.1");
        assert!(!is_public(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    }

    /// Proves every IPv6 form that embeds a loopback or private IPv4
    /// address is refused (issue 23: the translated, local-use NAT64 and
    /// 6to4 forms were connected to), while the same forms embedding a
    /// public address are allowed.
    #[test]
    fn ipv6_forms_embedding_private_ipv4_are_refused() {
        let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
        for refused in [
            "::ffff:127.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1::808:808",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "2002:a00:1::",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ] {
            assert!(!is_public(v6(refused)), "{refused}");
        }
        for allowed in ["::ffff:0:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111"] {
            assert!(is_public(v6(allowed)), "{allowed}");
        }
    }
}
