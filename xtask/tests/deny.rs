//! deny.toml's rules catch what they are for: a copyleft or unknown licence, a crate from a git
//! repository or another registry, a banned TLS stack; and pass the spellings crates really use.

use xtask::deny::{violations, DenyConfig, Metadata};

const RULES: &str = r#"
[licenses]
allow = ["MIT", "Apache-2.0", "Unicode-3.0"]
exceptions = [{ name = "webpki-roots", allow = ["CDLA-Permissive-2.0"] }]
[bans]
deny = [{ name = "openssl-sys", reason = "TLS is rustls" }]
[sources]
unknown-registry = "deny"
unknown-git = "deny"
"#;

const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

fn package(name: &str, license: Option<&str>, source: Option<&str>) -> serde_json::Value {
    serde_json::json!({"name": name, "version": "1.0.0", "license": license, "source": source})
}

fn check(packages: Vec<serde_json::Value>) -> Vec<String> {
    let config: DenyConfig = toml::from_str(RULES).unwrap();
    let metadata: Metadata =
        serde_json::from_value(serde_json::json!({ "packages": packages })).unwrap();
    violations(&config, &metadata)
}

#[test]
fn the_spellings_crates_use_pass() {
    let problems = check(vec![
        package("a", Some("MIT OR Apache-2.0"), Some(CRATES_IO)),
        package("b", Some("MIT/Apache-2.0"), Some(CRATES_IO)),
        package(
            "c",
            Some("(MIT OR Apache-2.0) AND Unicode-3.0"),
            Some(CRATES_IO),
        ),
        package("d", Some("Apache-2.0 WITH LLVM-exception"), Some(CRATES_IO)),
        package("e", Some("GPL-3.0 OR MIT"), Some(CRATES_IO)),
        package("webpki-roots", Some("CDLA-Permissive-2.0"), Some(CRATES_IO)),
        // A workspace member: ours, not judged.
        package("stopline-core", None, None),
    ]);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_planted_violation_of_each_rule_is_found() {
    let problems = check(vec![
        package("copyleft", Some("GPL-3.0"), Some(CRATES_IO)),
        package("both-needed", Some("MIT AND GPL-2.0"), Some(CRATES_IO)),
        package("no-licence", None, Some(CRATES_IO)),
        package("garbled", Some("MIT OR OR"), Some(CRATES_IO)),
        // The exception is the crate's own, not everyone's.
        package("other-data", Some("CDLA-Permissive-2.0"), Some(CRATES_IO)),
        package("openssl-sys", Some("MIT"), Some(CRATES_IO)),
        package(
            "forked",
            Some("MIT"),
            Some("git+https://example.com/fork.git#abc"),
        ),
        package(
            "elsewhere",
            Some("MIT"),
            Some("registry+https://example.com/index"),
        ),
    ]);
    let named = |name: &str| problems.iter().any(|p| p.starts_with(&format!("{name} ")));
    for name in [
        "copyleft",
        "both-needed",
        "no-licence",
        "garbled",
        "other-data",
        "openssl-sys",
        "forked",
        "elsewhere",
    ] {
        assert!(named(name), "{name} not reported: {problems:#?}");
    }
    assert_eq!(problems.len(), 8, "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("TLS is rustls")));
}
