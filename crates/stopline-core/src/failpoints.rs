//! The grammar of `STOPLINE_FAILPOINTS` (fault-injection tests): `name=action;name=action…`.
//!
//! One parser for every crate that arms failpoints (the store and the supervisor read the same
//! variable); each reads the variable itself, once, in its `failpoints` builds only.

/// The `(name, action)` pairs of a failpoint spec, in order, trimmed. A pair without `=` is not a
/// failpoint and is left out.
pub fn parse(spec: &str) -> Vec<(String, String)> {
    spec.split(';')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, action)| (name.trim().to_string(), action.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn pairs_are_trimmed_and_kept_in_order() {
        assert_eq!(
            parse(" ops.batch = crash ;fs.read=delay_if:5:/a=b;junk;;"),
            vec![
                ("ops.batch".to_string(), "crash".to_string()),
                ("fs.read".to_string(), "delay_if:5:/a=b".to_string()),
            ]
        );
        assert!(parse("").is_empty());
    }
}
