//! The MPA policy of every app, and the one way the command line changes it.
//!
//! A run's policy is an [`MpaPolicy`]: the deployment file's `[mpa]` table (a listener's
//! `[listeners.mpa]` overrides applied), or the app's embedded default when there is no
//! file ([`bench_default`], [`rping_default`]). Every app takes the same MPA flags
//! ([`MpaFlags`]) and puts them on top of that policy with [`MpaFlags::apply`]: a flag
//! given replaces the policy's value, a flag left out leaves it. The startup machines'
//! configurations come from the result through [`initiator`] and [`responder`]; the IRD
//! and ORD a Responder accepts with come from the flags alone ([`MpaFlags::accept`]).

use clap::Args;
use proto::rtr::{RtrType, RtrTypes, DEFAULT_RTR_PREFERENCE};
use proto::startup::{AcceptParams, InitiatorConfig, ResponderConfig};

/// The MPA policy of a run (the deployment file's `[mpa]` table: see `config/README.md`).
pub type MpaPolicy = appconfig::Mpa;

/// `iwarp bench`'s policy without a file: Rev 2 with IRD/ORD negotiation, CRC on, no
/// markers, the client-server model, IRD = ORD = 16.
pub fn bench_default() -> MpaPolicy {
    MpaPolicy {
        peer_to_peer: false,
        ..MpaPolicy::default()
    }
}

/// `iwarp rping`'s policy without a file: what rdma-core's rping asks through rdma_cm
/// (Rev 2, CRC on, client-server, IRD = ORD = 1).
pub fn rping_default() -> MpaPolicy {
    MpaPolicy {
        peer_to_peer: false,
        ird: 1,
        ord: 1,
        ..MpaPolicy::default()
    }
}

/// The MPA flags every app takes. Each one given replaces the policy's value.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct MpaFlags {
    /// MPA markers on (the M bit).
    #[arg(long)]
    pub markers: bool,
    /// MPA CRC off (the C bit; on by default).
    #[arg(long)]
    pub no_crc: bool,
    /// MPA Rev 1 startup: no IRD/ORD negotiation, no peer-to-peer.
    #[arg(long, conflicts_with = "p2p")]
    pub rev1: bool,
    /// Peer-to-peer model (RFC 6581) with this RTR: write, read or send.
    #[arg(long, value_name = "RTR", value_parser = parse_rtr)]
    pub p2p: Option<RtrType>,
    /// IRD to ask for (Initiator); the least IRD to accept with (Responder; default: the
    /// Request's, like `rdma_accept(id, NULL)`).
    #[arg(long, value_name = "N", conflicts_with = "ird_ord")]
    pub ird: Option<u16>,
    /// ORD to ask for (Initiator); the most ORD to accept with (Responder).
    #[arg(long, value_name = "N", conflicts_with = "ird_ord")]
    pub ord: Option<u16>,
    /// IRD and ORD both (as `--ird N --ord N`).
    #[arg(long, value_name = "N")]
    pub ird_ord: Option<u16>,
}

/// `write`, `read` or `send`.
pub fn parse_rtr(s: &str) -> Result<RtrType, String> {
    [RtrType::Write, RtrType::Read, RtrType::Send]
        .into_iter()
        .find(|t| t.name() == s)
        .ok_or_else(|| format!("{s:?} is not an RTR type: write, read or send"))
}

impl MpaFlags {
    /// The IRD the flags ask for, if any.
    pub fn ird(&self) -> Option<u16> {
        self.ird.or(self.ird_ord)
    }

    /// The ORD the flags ask for, if any.
    pub fn ord(&self) -> Option<u16> {
        self.ord.or(self.ird_ord)
    }

    /// Puts the flags given on top of `m`.
    pub fn apply(&self, m: &mut MpaPolicy) {
        if self.markers {
            m.markers = true;
        }
        if self.no_crc {
            m.crc = false;
        }
        if self.rev1 {
            m.rev = 1;
            m.peer_to_peer = false;
        }
        if let Some(t) = self.p2p {
            m.rev = m.rev.max(2);
            m.peer_to_peer = true;
            m.rtr_types = vec![t];
        }
        if let Some(n) = self.ird() {
            m.ird = n;
        }
        if let Some(n) = self.ord() {
            m.ord = n;
        }
    }

    /// `policy` with the flags on top.
    pub fn applied(&self, policy: &MpaPolicy) -> MpaPolicy {
        let mut m = policy.clone();
        self.apply(&mut m);
        m
    }

    /// How a Responder accepts: the least IRD and the most ORD the flags give, else the
    /// Request's values.
    pub fn accept(&self) -> AcceptParams {
        let d = AcceptParams::default();
        AcceptParams {
            ird: self.ird().unwrap_or(d.ird),
            ord: self.ord().unwrap_or(d.ord),
            ..d
        }
    }
}

/// The RTR types of a policy's list, and the order of preference it gives (the types it
/// leaves out follow, Write, Read, Send).
fn rtr_types(types: &[RtrType]) -> (RtrTypes, [RtrType; 3]) {
    let mut pref: Vec<RtrType> = types.to_vec();
    for t in DEFAULT_RTR_PREFERENCE {
        if !pref.contains(&t) {
            pref.push(t);
        }
    }
    (RtrTypes::from_types(types), [pref[0], pref[1], pref[2]])
}

/// The MPA Initiator configuration of a policy.
pub fn initiator(m: &MpaPolicy) -> InitiatorConfig {
    let (types, preference) = rtr_types(&m.rtr_types);
    InitiatorConfig {
        dialect: m.dialect,
        markers: m.markers,
        crc: m.crc,
        enhanced: m.rev >= 2,
        ird: m.ird,
        ord: m.ord,
        peer_to_peer: m.peer_to_peer,
        rtr_types: types,
        rtr_preference: preference,
        reply_timeout: Some(m.reply_timeout.0),
        first_fpdu_delay: m.first_fpdu_delay.0,
        ..InitiatorConfig::default()
    }
}

/// The MPA Responder configuration of a policy.
pub fn responder(m: &MpaPolicy) -> ResponderConfig {
    let (types, preference) = rtr_types(&m.rtr_types);
    ResponderConfig {
        dialect: m.dialect,
        markers: m.markers,
        crc: m.crc,
        rtr_types: types,
        rtr_preference: preference,
        max_rev: m.rev,
        request_timeout: Some(m.request_timeout.0),
        rtr_timeout: Some(m.rtr_timeout.0),
        first_fpdu_timeout: Some(m.first_fpdu_timeout.0),
        max_private_data: usize::from(m.max_private_data),
        ..ResponderConfig::default()
    }
}

/// A policy in a few words, for report banners: `rev2 markers=off crc=on ird=16 ord=16`
/// (the IRD and ORD asked for), plus ` p2p=write` (the first RTR type) in the
/// peer-to-peer model.
pub fn label(m: &MpaPolicy) -> String {
    let onoff = |b| if b { "on" } else { "off" };
    let mut s = format!(
        "rev{} markers={} crc={} ird={} ord={}",
        m.rev,
        onoff(m.markers),
        onoff(m.crc),
        m.ird,
        m.ord
    );
    if m.peer_to_peer {
        let t = m.rtr_types.first().copied().unwrap_or(RtrType::Write);
        s.push_str(&format!(" p2p={}", t.name()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        mpa: MpaFlags,
    }

    fn flags(args: &[&str]) -> MpaFlags {
        let mut v = vec!["x"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap().mpa
    }

    #[test]
    fn no_flag_leaves_the_policy() {
        let file = MpaPolicy {
            markers: true,
            crc: false,
            ird: 3,
            ..MpaPolicy::default()
        };
        assert_eq!(flags(&[]).applied(&file), file);
        assert_eq!(flags(&[]).accept(), AcceptParams::default());
    }

    /// `[mpa] max_private_data` is what a listener takes.
    #[test]
    fn max_private_data_reaches_the_responder() {
        let m = MpaPolicy {
            max_private_data: 100,
            ..MpaPolicy::default()
        };
        assert_eq!(responder(&m).max_private_data, 100);
        assert_eq!(responder(&MpaPolicy::default()).max_private_data, 512);
    }

    #[test]
    fn each_flag_replaces_its_value() {
        let base = bench_default();
        let m = flags(&["--markers"]).applied(&base);
        assert!(m.markers && initiator(&m).markers && responder(&m).markers);
        let m = flags(&["--no-crc"]).applied(&base);
        assert!(!initiator(&m).crc && !responder(&m).crc);
        let m = flags(&["--rev1"]).applied(&MpaPolicy::default());
        assert!(!initiator(&m).enhanced && !m.peer_to_peer);
        assert_eq!(responder(&m).max_rev, 1);
        let m = flags(&["--p2p", "read"]).applied(&base);
        let i = initiator(&m);
        assert!(i.peer_to_peer && i.enhanced);
        assert_eq!(i.rtr_types, RtrTypes::NONE.with(RtrType::Read));
        assert_eq!(i.rtr_preference[0], RtrType::Read);
        assert_eq!(label(&m), "rev2 markers=off crc=on ird=16 ord=16 p2p=read");
        let f = flags(&["--ird", "2", "--ord", "8"]);
        let i = initiator(&f.applied(&base));
        assert_eq!((i.ird, i.ord), (2, 8));
        assert_eq!((f.accept().ird, f.accept().ord), (2, 8));
        let f = flags(&["--ird-ord", "5"]);
        assert_eq!((f.ird(), f.ord()), (Some(5), Some(5)));
        assert!(Cli::try_parse_from(["x", "--ird-ord", "5", "--ird", "1"]).is_err());
        assert!(Cli::try_parse_from(["x", "--rev1", "--p2p", "write"]).is_err());
        assert!(Cli::try_parse_from(["x", "--p2p", "rdma"]).is_err());
    }

    #[test]
    fn defaults_of_the_apps() {
        let b = initiator(&bench_default());
        assert!(!b.peer_to_peer && b.crc && !b.markers && b.enhanced);
        assert_eq!((b.ird, b.ord), (16, 16));
        let r = initiator(&rping_default());
        assert_eq!((r.ird, r.ord), (1, 1));
        assert_eq!(
            label(&bench_default()),
            "rev2 markers=off crc=on ird=16 ord=16"
        );
    }

    #[test]
    fn mpa_policy_translates() {
        let mut m = MpaPolicy {
            markers: true,
            crc: false,
            rev: 2,
            ird: 7,
            ord: 9,
            rtr_types: vec![RtrType::Read, RtrType::Send],
            ..MpaPolicy::default()
        };
        let i = initiator(&m);
        assert!(i.markers && !i.crc && i.enhanced && i.peer_to_peer);
        assert_eq!((i.ird, i.ord), (7, 9));
        assert_eq!(
            i.rtr_types,
            RtrTypes::NONE.with(RtrType::Read).with(RtrType::Send)
        );
        assert_eq!(
            i.rtr_preference,
            [RtrType::Read, RtrType::Send, RtrType::Write]
        );
        let r = responder(&m);
        assert!(r.markers && !r.crc);
        assert_eq!(r.max_rev, 2);
        m.rev = 1;
        assert!(!initiator(&m).enhanced);
        assert_eq!(responder(&m).max_rev, 1);
    }
}
