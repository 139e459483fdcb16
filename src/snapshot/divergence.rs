//! Where two replies' tokens part, and what kind of change that is: numeric drift (the runs'
//! own logprobs show a near tie at the step) or a real change of the model's mind.
use super::file::{SnapshotBody, SnapshotLogprob};

/// Below this logprob gap (nats) between the two candidate tokens a divergence counts as
/// numeric drift (a near-tie flipped by kernel or batching noise).
pub const NUMERIC_DRIFT_MARGIN: f32 = 0.1;

/// How far one run preferred its own token over the other run's at the divergence step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margin {
    /// logprob(own token) − logprob(other run's token), in nats.
    pub nats: f32,
    /// The other token was not in this run's top list: the true margin is at least `nats`
    /// (measured to the least likely listed alternative).
    pub at_least: bool,
}

/// What kind of change a token divergence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DivergenceClass {
    /// The two candidates were nearly tied: numerics (kernels, batching, quantization) flipped it.
    NumericDrift,
    /// One run clearly preferred its token: the model behaves differently.
    BehaviourChange,
    /// No logprobs to tell.
    Unknown,
}

impl DivergenceClass {
    pub fn name(self) -> &'static str {
        match self {
            DivergenceClass::NumericDrift => "numeric-drift",
            DivergenceClass::BehaviourChange => "behaviour-change",
            DivergenceClass::Unknown => "unknown",
        }
    }
}

/// The first generated token where the accepted and the new reply differ.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenDivergence {
    /// 0-based index into the generated tokens.
    pub index: usize,
    /// Whether the sequences compared were token ids (else decoded logprob tokens).
    pub by_ids: bool,
    /// The token each side produced there (`None`: that reply had already ended).
    pub accepted_token: Option<String>,
    pub new_token: Option<String>,
    pub accepted_id: Option<u32>,
    pub new_id: Option<u32>,
    /// Each run's logprob of its own token.
    pub accepted_logprob: Option<f32>,
    pub new_logprob: Option<f32>,
    /// Each run's logprob of the *other* run's token, when its top list has it.
    pub accepted_logprob_of_new: Option<f32>,
    pub new_logprob_of_accepted: Option<f32>,
    pub accepted_margin: Option<Margin>,
    pub new_margin: Option<Margin>,
    pub class: DivergenceClass,
}

impl TokenDivergence {
    /// One line for reports.
    pub fn describe(&self) -> String {
        let tok = |t: &Option<String>| match t {
            Some(t) => serde_json::Value::String(t.clone()).to_string(),
            None => "(end)".to_string(),
        };
        let margin = |m: &Option<Margin>| match m {
            Some(m) => format!("{}{:.3}", if m.at_least { "≥" } else { "" }, m.nats),
            None => "?".to_string(),
        };
        format!(
            "token {}: accepted {} vs new {} (margin accepted {} / new {} nats): {}",
            self.index,
            tok(&self.accepted_token),
            tok(&self.new_token),
            margin(&self.accepted_margin),
            margin(&self.new_margin),
            self.class.name()
        )
    }
}

pub(super) fn divergence(
    a: &SnapshotBody,
    b: &SnapshotBody,
    drift_margin: f32,
) -> Option<TokenDivergence> {
    let seq = match (&a.token_ids, &b.token_ids, &a.logprobs, &b.logprobs) {
        (Some(x), Some(y), _, _) => Seq::Ids(x, y),
        (_, _, Some(x), Some(y)) => Seq::Tokens(x, y),
        _ => return None,
    };
    let (index, len_a, len_b) = match seq {
        Seq::Ids(x, y) => (first_difference(x, y)?, x.len(), y.len()),
        Seq::Tokens(x, y) => {
            let tx: Vec<&str> = x.iter().map(|l| l.token.as_str()).collect();
            let ty: Vec<&str> = y.iter().map(|l| l.token.as_str()).collect();
            (first_difference(&tx, &ty)?, x.len(), y.len())
        }
    };
    let lp_a = a.logprobs.as_ref().and_then(|l| l.get(index));
    let lp_b = b.logprobs.as_ref().and_then(|l| l.get(index));
    let (id_a, id_b) = match seq {
        Seq::Ids(x, y) => (x.get(index).copied(), y.get(index).copied()),
        Seq::Tokens(..) => (None, None),
    };
    let token = |lp: Option<&SnapshotLogprob>, id: Option<u32>, len: usize| {
        if index >= len {
            None
        } else {
            Some(
                lp.map(|l| l.token.clone())
                    .unwrap_or_else(|| format!("id {}", id.unwrap_or(0))),
            )
        }
    };
    let accepted_token = token(lp_a, id_a, len_a);
    let new_token = token(lp_b, id_b, len_b);
    let of_other = |lp: Option<&SnapshotLogprob>, other: &Option<String>| {
        let (lp, other) = (lp?, other.as_ref()?);
        lp.top.iter().find(|(t, _)| t == other).map(|(_, l)| *l)
    };
    let accepted_logprob_of_new = of_other(lp_a, &new_token);
    let new_logprob_of_accepted = of_other(lp_b, &accepted_token);
    let accepted_margin = margin(lp_a, accepted_logprob_of_new, new_token.is_some());
    let new_margin = margin(lp_b, new_logprob_of_accepted, accepted_token.is_some());
    let class = classify(&[accepted_margin, new_margin], drift_margin);
    Some(TokenDivergence {
        index,
        by_ids: matches!(seq, Seq::Ids(..)),
        accepted_token,
        new_token,
        accepted_id: id_a,
        new_id: id_b,
        accepted_logprob: lp_a.map(|l| l.logprob),
        new_logprob: lp_b.map(|l| l.logprob),
        accepted_logprob_of_new,
        new_logprob_of_accepted,
        accepted_margin,
        new_margin,
        class,
    })
}

pub(super) fn first_difference<T: PartialEq>(x: &[T], y: &[T]) -> Option<usize> {
    if x == y {
        return None;
    }
    Some(
        x.iter()
            .zip(y)
            .position(|(p, q)| p != q)
            .unwrap_or(x.len().min(y.len())),
    )
}

/// One run's margin: its own token's logprob minus the other token's, or a lower bound when
/// the other token is not among its listed alternatives.
pub(super) fn margin(
    own: Option<&SnapshotLogprob>,
    other_lp: Option<f32>,
    other_exists: bool,
) -> Option<Margin> {
    let own = own?;
    if !other_exists {
        return None;
    }
    match other_lp {
        Some(l) => Some(Margin {
            nats: own.logprob - l,
            at_least: false,
        }),
        None => {
            let floor = own
                .top
                .iter()
                .map(|(_, l)| *l)
                .fold(f32::INFINITY, f32::min);
            floor.is_finite().then_some(Margin {
                nats: own.logprob - floor,
                at_least: true,
            })
        }
    }
}

/// Behaviour change when any run clearly preferred its token; numeric drift when every known
/// margin is a measured near-tie; unknown otherwise.
pub(super) fn classify(margins: &[Option<Margin>], threshold: f32) -> DivergenceClass {
    let known: Vec<Margin> = margins.iter().flatten().copied().collect();
    if known.iter().any(|m| m.nats >= threshold) {
        DivergenceClass::BehaviourChange
    } else if !known.is_empty() && known.iter().all(|m| !m.at_least) {
        DivergenceClass::NumericDrift
    } else {
        DivergenceClass::Unknown
    }
}

/// The sequences to find a divergence in: ids when both sides have them, else the decoded
/// tokens of the logprobs.
enum Seq<'a> {
    Ids(&'a [u32], &'a [u32]),
    Tokens(&'a [SnapshotLogprob], &'a [SnapshotLogprob]),
}
