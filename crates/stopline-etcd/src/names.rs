//! The fixed key names under the prefix: the local control directory's names, as etcd keys.
//!
//! `<prefix>/latches/<id>.json`, `<prefix>/breakglass.wal/<seq>` (one key per WAL record, the
//! sequence number zero-padded to 20 digits so keys sort in log order), `<prefix>/epoch.json`,
//! `<prefix>/state.json`, `<prefix>/breakglass.cleared/epoch-<N>/<id>.json`,
//! `<prefix>/servers/<id>.json`, `<prefix>/acks/<gateway>/<latch file>`,
//! `<prefix>/keys/verify.pub`, `<prefix>/recovery-evidence/<file>-<sha256>.bin`, and the fleet's
//! budget ledger `<prefix>/budgets/accounts/<jti>.json` with its leased
//! `<prefix>/budgets/holders/<lease>`, and the fleet's breaker counts
//! `<prefix>/breakers/<agent>.json`. Tests corrupt
//! these on purpose, so a name here is part of the contract.

/// Key builders for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// The names under `prefix` (no trailing `/`).
    pub fn new(prefix: &str) -> Names {
        Names {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Everything under the prefix (`<prefix>/`), for watches.
    pub fn all(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// `<prefix>/latches/` (a range prefix).
    pub fn latches(&self) -> String {
        format!("{}/latches/", self.prefix)
    }

    /// `<prefix>/latches/<file>`.
    pub fn latch(&self, file: &str) -> String {
        format!("{}{file}", self.latches())
    }

    /// `<prefix>/breakglass.wal/` (a range prefix).
    pub fn wal(&self) -> String {
        format!("{}/breakglass.wal/", self.prefix)
    }

    /// `<prefix>/breakglass.wal/<seq, 20 digits>`.
    pub fn wal_record(&self, seq: u64) -> String {
        format!("{}{seq:020}", self.wal())
    }

    /// `<prefix>/epoch.json`.
    pub fn epoch(&self) -> String {
        format!("{}/epoch.json", self.prefix)
    }

    /// `<prefix>/state.json`.
    pub fn state(&self) -> String {
        format!("{}/state.json", self.prefix)
    }

    /// `<prefix>/breakglass.cleared/` (a range prefix).
    pub fn cleared(&self) -> String {
        format!("{}/breakglass.cleared/", self.prefix)
    }

    /// `<prefix>/breakglass.cleared/epoch-<n>/<file>`.
    pub fn cleared_latch(&self, epoch: u64, file: &str) -> String {
        format!("{}epoch-{epoch}/{file}", self.cleared())
    }

    /// `<prefix>/servers/` (a range prefix).
    pub fn servers(&self) -> String {
        format!("{}/servers/", self.prefix)
    }

    /// `<prefix>/servers/<id>.json`.
    pub fn server(&self, id: &str) -> String {
        format!("{}{id}.json", self.servers())
    }

    /// `<prefix>/acks/` (a range prefix).
    pub fn acks(&self) -> String {
        format!("{}/acks/", self.prefix)
    }

    /// `<prefix>/acks/<gateway>/` (a range prefix).
    pub fn acks_of(&self, gateway: &str) -> String {
        format!("{}{gateway}/", self.acks())
    }

    /// `<prefix>/acks/<gateway>/<latch file>`.
    pub fn ack(&self, gateway: &str, latch_file: &str) -> String {
        format!("{}{latch_file}", self.acks_of(gateway))
    }

    /// `<prefix>/keys/verify.pub`: the control plane's public key, 64 hex digits.
    pub fn verify_key(&self) -> String {
        format!("{}/keys/verify.pub", self.prefix)
    }

    /// `<prefix>/budgets/` (a range prefix): the fleet's budget ledger, the one range besides
    /// `servers/` and `acks/` a gateway writes.
    pub fn budgets(&self) -> String {
        format!("{}/budgets/", self.prefix)
    }

    /// `<prefix>/budgets/accounts/<jti>.json`: one token's account.
    pub fn budget_account(&self, jti: &str) -> String {
        format!("{}accounts/{jti}.json", self.budgets())
    }

    /// `<prefix>/budgets/holders/` (a range prefix): the gateways' leased holder keys.
    pub fn budget_holders(&self) -> String {
        format!("{}holders/", self.budgets())
    }

    /// `<prefix>/budgets/holders/<holder>`, attached to that holder's lease.
    pub fn budget_holder(&self, holder: &str) -> String {
        format!("{}{holder}", self.budget_holders())
    }

    /// `<prefix>/breakers/` (a range prefix): the fleet's agent breaker counts.
    pub fn breakers(&self) -> String {
        format!("{}/breakers/", self.prefix)
    }

    /// `<prefix>/breakers/<agent>.json`.
    pub fn breaker(&self, agent: &str) -> String {
        format!("{}{agent}.json", self.breakers())
    }

    /// `<prefix>/recovery-evidence/<name>`.
    pub fn evidence(&self, name: &str) -> String {
        format!("{}/recovery-evidence/{name}", self.prefix)
    }

    /// The part of `key` after `range` (a range prefix), if `key` lies in it.
    pub fn strip<'a>(range: &str, key: &'a [u8]) -> Option<&'a str> {
        std::str::from_utf8(key).ok()?.strip_prefix(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_mirror_the_control_directory() {
        let n = Names::new("/stopline/");
        assert_eq!(n.latch("latch_1.json"), "/stopline/latches/latch_1.json");
        assert_eq!(
            n.wal_record(7),
            "/stopline/breakglass.wal/00000000000000000007"
        );
        assert_eq!(
            n.cleared_latch(3, "latch_1.json"),
            "/stopline/breakglass.cleared/epoch-3/latch_1.json"
        );
        assert_eq!(
            n.ack("gw", "latch_1.json"),
            "/stopline/acks/gw/latch_1.json"
        );
        assert_eq!(
            Names::strip(&n.latches(), b"/stopline/latches/x.json"),
            Some("x.json")
        );
        assert!(n.wal_record(9) < n.wal_record(10));
    }
}
