//! `standin --reply`: weights whose greedy reply to any prompt is a given text, then the turn
//! terminator — a stand-in that writes a family's real framing (a think block, one or several
//! `<tool_call>` blocks) where random weights never would.
//!
//! The model is a lookup table made of a transformer's own parts. Every embedding is `u + r`:
//! `u` shared, the `r`s orthonormal for the reply's ids. Every layer's output projections are
//! zero, so the residual stream carries the last token's embedding to the head unchanged, and
//! the head scores the reply's first id on `u` (any token leads into the reply) and each next
//! id on its predecessor's `r`, twice as high (inside the reply, the reply goes on): a bigram
//! table. That is enough while every id of the reply has one successor.
//!
//! Parallel tool calls need more: `<tool_call>` is one added token, written twice, followed by
//! two different calls. There, the token *before* it decides, so one attention head of layer 0
//! is kept: its query and key are constant (read from `u`), and rotary embeddings turn their
//! product into a function of the distance that peaks at one position back; its value copies
//! which token stood there into a slot `s` of the residual stream, and the head breaks the tie
//! on that slot: a trigram table. Both are checked by generating the reply before the stand-in
//! is handed out.
use std::collections::{HashMap, HashSet};

use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use serde_json::{json, Value};

use super::weights::{body, c, save, turn_terminator, Picked, Shape};
use super::Options;
use crate::endpoint::candle::CandleModel;
use crate::endpoint::GenerateRequest;
use crate::error::{Error, Result};

/// The head's weights, in units of one basis direction of the normed residual stream.
/// The reply's first id, on `u`: every token leads into the reply.
const FIRST: f32 = 4.0;
/// The next id, on its predecessor's `r`: inside the reply, the reply goes on.
const NEXT: f32 = 8.0;
/// The next id of an id written more than once, on the slot of the token before it: above
/// FIRST (the first id may be the rival), below NEXT (a slot must not beat a bigram).
const TIE: f32 = 6.0;
/// The next id after the reply's first token when that token recurs: where the prompt ends on
/// a token the build did not foresee, no slot is filled and this one wins the tie.
const DEFAULT: f32 = 1.0;
/// Nats between one position back and any other in the copying head's attention scores.
const ATTENTION_MARGIN: f64 = 40.0;

/// Weights whose greedy reply to any prompt is `reply`, then the turn terminator.
pub fn scripted(
    o: &Options,
    shape: &Shape,
    tokenizer: &tokenizers::Tokenizer,
    reply: &str,
) -> Result<Picked> {
    if shape.tied() {
        return Err(Error::input(format!(
            "a scripted reply needs an output head apart from the embedding; {} ties them",
            shape.model_type
        )));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let mut tensors = body(shape, &mut rng)?;
    for (name, t) in tensors.iter_mut() {
        let output = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
        if output {
            *t = t.zeros_like().map_err(c)?;
        }
    }
    let zero_head =
        Tensor::zeros((shape.vocab, shape.hidden), DType::F32, &Device::Cpu).map_err(c)?;
    tensors.insert("lm_head.weight".into(), zero_head);
    save(&o.out, &tensors, shape.dtype)?;
    let (term_id, term_text) = turn_terminator(&o.out, tokenizer)?.ok_or_else(|| {
        Error::input("a scripted reply ends with the template's turn terminator, and the template writes none after an assistant turn")
    })?;
    let starts = prompt_ends(&o.out)?;
    let mut avoid: HashSet<u32> = starts.iter().copied().collect();
    avoid.insert(term_id);
    let mut ids = spell(tokenizer, reply, shape.vocab, &avoid, term_id).ok_or_else(|| {
        Error::input(format!(
            "{reply:?} cannot be spelt for a scripted stand-in: each token, with the one before it, must name the next (ids are used once each where the text allows, and none a prompt ends on)"
        ))
        .hint("shorten the reply, or repeat less of it: a text written twice over needs another spelling the second time")
    })?;
    ids.push(term_id);
    let script = Script::new(ids, &starts);
    let width = script.basis_len() + 1;
    if shape.hidden < width {
        return Err(Error::input(format!(
            "a scripted reply of {} tokens ({} different) needs a hidden width of at least {width}; got {}",
            script.ids.len(),
            script.distinct.len(),
            shape.hidden
        ))
        .hint("pass --hidden with a larger multiple of 16"));
    }
    let basis = Basis::draw(&mut rng, shape.hidden, &script);
    let (embed, head) = table(&mut rng, shape, &script, &basis)?;
    tensors.insert("model.embed_tokens.weight".into(), embed);
    tensors.insert("lm_head.weight".into(), head);
    let mut notes = vec![format!(
        "scripted: every greedy reply is {reply:?} then {term_text:?} ({} tokens)",
        script.ids.len() - 1
    )];
    if !script.context.is_empty() {
        copy_previous_token(shape, &script, &basis, &mut tensors)?;
        notes.push(format!(
            "{} token(s) of the reply recur with different successors: layer 0's head 0 reads the token before them",
            script.ties.iter().map(|t| t.last).collect::<HashSet<_>>().len()
        ));
    }
    save(&o.out, &tensors, shape.dtype)?;
    if !script.context.is_empty() {
        verify(&o.out, &script, reply)?;
    }
    Ok(Picked {
        tensors,
        terminator: Some((term_id, term_text)),
        ending: (1, 1),
        notes,
    })
}

/// The reply's ids (the terminator last) and what the table needs to write them.
struct Script {
    ids: Vec<u32>,
    /// Each id once, in order of first appearance.
    distinct: Vec<u32>,
    /// Where an id recurs with another successor: which token before it decides.
    ties: Vec<Tie>,
    /// The tokens the copying head must tell apart (None: the prompt's end, before the reply).
    context: Vec<Option<u32>>,
    /// The prompt's last tokens, when the reply's first id is one that recurs.
    starts: Vec<u32>,
}

/// `last`, preceded by `prev` (None: the prompt), is followed by `next`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Tie {
    prev: Option<u32>,
    last: u32,
    next: u32,
}

impl Script {
    fn new(ids: Vec<u32>, starts: &[u32]) -> Script {
        let mut distinct = Vec::new();
        let mut successors: HashMap<u32, HashSet<u32>> = HashMap::new();
        for (i, &id) in ids.iter().enumerate() {
            if !distinct.contains(&id) {
                distinct.push(id);
            }
            if let Some(&next) = ids.get(i + 1) {
                successors.entry(id).or_default().insert(next);
            }
        }
        let mut ties = Vec::new();
        for (i, pair) in ids.windows(2).enumerate() {
            if successors[&pair[0]].len() > 1 {
                let prev = i.checked_sub(1).map(|j| ids[j]);
                let tie = Tie {
                    prev,
                    last: pair[0],
                    next: pair[1],
                };
                if !ties.contains(&tie) {
                    ties.push(tie);
                }
            }
        }
        let mut context: Vec<Option<u32>> = Vec::new();
        for t in &ties {
            if !context.contains(&t.prev) {
                context.push(t.prev);
            }
        }
        let starts = if context.contains(&None) {
            starts.to_vec()
        } else {
            Vec::new()
        };
        Script {
            ids,
            distinct,
            ties,
            context,
            starts,
        }
    }

    /// `u`, an `r` per id, an `s` per context token, an `e` per prompt end.
    fn basis_len(&self) -> usize {
        1 + self.distinct.len() + self.context.len() + self.starts.len()
    }
}

/// Orthonormal directions of the residual stream (Gram-Schmidt on random vectors).
struct Basis {
    u: Vec<f32>,
    r: HashMap<u32, Vec<f32>>,
    s: HashMap<Option<u32>, Vec<f32>>,
    e: HashMap<u32, Vec<f32>>,
    all: Vec<Vec<f32>>,
}

impl Basis {
    /// Drawn in the order u, r, s, e: a reply without ties draws what the bigram table always
    /// drew, so its stand-ins keep their bytes.
    fn draw(rng: &mut rand::rngs::StdRng, h: usize, script: &Script) -> Basis {
        let mut all: Vec<Vec<f32>> = Vec::new();
        while all.len() < script.basis_len() {
            all.extend(clear_of(rng, h, &all));
        }
        let mut at = 1;
        let mut take = || {
            at += 1;
            all[at - 1].clone()
        };
        let r = script.distinct.iter().map(|&id| (id, take())).collect();
        let s = script.context.iter().map(|&c| (c, take())).collect();
        let e = script.starts.iter().map(|&id| (id, take())).collect();
        Basis {
            u: all[0].clone(),
            r,
            s,
            e,
            all,
        }
    }
}

/// A random unit vector orthogonal to `basis`; None when it came out (nearly) inside it.
fn clear_of(rng: &mut rand::rngs::StdRng, h: usize, basis: &[Vec<f32>]) -> Option<Vec<f32>> {
    let normal = Normal::new(0f32, 1.0).expect("a unit normal");
    let mut x: Vec<f32> = (0..h).map(|_| normal.sample(rng)).collect();
    for b in basis {
        let d = dot(&x, b);
        x.iter_mut().zip(b).for_each(|(xi, bi)| *xi -= d * bi);
    }
    let n = dot(&x, &x).sqrt();
    (n > 1e-3).then(|| x.into_iter().map(|xi| xi / n).collect())
}

/// The embedding and the head of the table (see the module's comment).
fn table(
    rng: &mut rand::rngs::StdRng,
    shape: &Shape,
    script: &Script,
    basis: &Basis,
) -> Result<(Tensor, Tensor)> {
    let (v, h) = (shape.vocab, shape.hidden);
    let mut embed = vec![0f32; v * h];
    for t in 0..v {
        let id = t as u32;
        let r = match basis.r.get(&id).or_else(|| basis.e.get(&id)) {
            Some(r) => r.clone(),
            // Any other token: a random direction clear of the basis.
            None => loop {
                if let Some(x) = clear_of(rng, h, &basis.all) {
                    break x;
                }
            },
        };
        let row = &mut embed[t * h..(t + 1) * h];
        for j in 0..h {
            row[j] = basis.u[j] + r[j];
        }
    }
    let mut head = vec![0f32; v * h];
    let mut add = |id: u32, dir: &[f32], scale: f32| {
        let row = &mut head[id as usize * h..(id as usize + 1) * h];
        for j in 0..h {
            row[j] += dir[j] * scale;
        }
    };
    add(script.ids[0], &basis.u, FIRST);
    let mut pairs = HashSet::new();
    for pair in script.ids.windows(2) {
        if pairs.insert((pair[0], pair[1])) {
            add(pair[1], &basis.r[&pair[0]], NEXT);
        }
    }
    let mut slots = HashSet::new();
    for t in &script.ties {
        if slots.insert((t.prev, t.next)) {
            add(t.next, &basis.s[&t.prev], TIE);
            if t.prev.is_none() {
                add(t.next, &basis.u, DEFAULT);
            }
        }
    }
    let embed = Tensor::from_vec(embed, (v, h), &Device::Cpu).map_err(c)?;
    let head = Tensor::from_vec(head, (v, h), &Device::Cpu).map_err(c)?;
    Ok((embed, head))
}

/// Layer 0's head 0 attends one position back and writes which context token stood there into
/// that token's slot `s` (the module's comment says why).
fn copy_previous_token(
    shape: &Shape,
    script: &Script,
    basis: &Basis,
    tensors: &mut HashMap<String, Tensor>,
) -> Result<()> {
    let (h, d) = (shape.hidden, shape.head_dim);
    if !["llama", "mistral", "qwen2", "qwen3"].contains(&shape.model_type.as_str()) {
        return Err(Error::input(format!(
            "this reply writes a token twice with different successors, which a {} stand-in cannot script (built for llama, mistral, qwen2 and qwen3)",
            shape.model_type
        )));
    }
    if script.context.len() > d {
        return Err(Error::input(format!(
            "this reply needs {} tokens told apart by the one before them; a head of width {d} holds {d}",
            script.context.len()
        ))
        .hint("pass a larger --head-dim, or repeat less of the reply"));
    }
    let (q, k) = previous_token_query_key(shape.rope_theta, d, shape.context)?;
    // Layer 0's input is an embedding `u + r` (length √2), normed to √hidden: `u` reads √(h/2).
    let read = (h as f32 / 2.0).sqrt();
    let p = "model.layers.0.self_attn";
    let mut wq = matrix(&tensors[&format!("{p}.q_proj.weight")])?;
    let mut wk = matrix(&tensors[&format!("{p}.k_proj.weight")])?;
    let mut wv = matrix(&tensors[&format!("{p}.v_proj.weight")])?;
    for i in 0..d {
        wq[i] = basis.u.iter().map(|x| x * q[i] / read).collect();
        wk[i] = basis.u.iter().map(|x| x * k[i] / read).collect();
        // The value: one slot per context token, 1 where that token stands.
        wv[i] = match script.context.get(i) {
            Some(Some(id)) => basis.r[id].iter().map(|x| x / read).collect(),
            Some(None) => {
                let mut row = vec![0f32; h];
                for e in basis.e.values() {
                    row.iter_mut().zip(e).for_each(|(a, b)| *a += b / read);
                }
                row
            }
            None => vec![0f32; h],
        };
    }
    let mut wo = vec![vec![0f32; shape.heads * d]; h];
    for (j, ctx) in script.context.iter().enumerate() {
        for (row, x) in wo.iter_mut().zip(&basis.s[ctx]) {
            row[j] = *x;
        }
    }
    tensors.insert(format!("{p}.q_proj.weight"), tensor(wq)?);
    tensors.insert(format!("{p}.k_proj.weight"), tensor(wk)?);
    tensors.insert(format!("{p}.v_proj.weight"), tensor(wv)?);
    tensors.insert(format!("{p}.o_proj.weight"), tensor(wo)?);
    if shape.qkv_bias() {
        for b in ["q", "k", "v"] {
            let name = format!("{p}.{b}_proj.bias");
            let zero = tensors[&name].zeros_like().map_err(c)?;
            tensors.insert(name, zero);
        }
    }
    if shape.model_type == "qwen3" {
        // Qwen3 norms each head's query and key: the weight gives them back their length.
        for (name, v) in [("q_norm", &q), ("k_norm", &k)] {
            let rms = (v.iter().map(|x| x * x).sum::<f32>() / d as f32).sqrt();
            let w = Tensor::full(rms, d, &Device::Cpu).map_err(c)?;
            tensors.insert(format!("{p}.{name}.weight"), w);
        }
    }
    Ok(())
}

/// A query and a key, the same at every position, whose rotary-embedded product peaks one
/// position back by `ATTENTION_MARGIN` nats over every other distance the context allows.
///
/// Rotary embeddings turn each pair of dimensions (i, i + d/2) by the position times its
/// frequency θᵢ (neox layout, as transformers, vLLM, candle and llama.cpp's qwen and converted
/// llama weights use). A query (a, 0) and a key a·(cos θᵢ, sin θᵢ) then score a²·cos(θᵢ·(t − 1))
/// for a key t positions back: summed over the pairs used, highest at t = 1. The fastest pairs
/// tell neighbours apart; slower ones keep a far position from lining up with them again.
fn previous_token_query_key(theta: f64, d: usize, context: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let half = d / 2;
    let freq: Vec<f64> = (0..half)
        .map(|i| theta.powf(-2.0 * i as f64 / d as f64))
        .collect();
    // The fastest `n` pairs, equally weighted: the n whose worst margin per unit weight is best.
    let worst = |n: usize| {
        (2..=context as i64)
            .chain(std::iter::once(0))
            .map(|back| {
                let t = (back - 1) as f64;
                (0..n).map(|i| 1.0 - (freq[i] * t).cos()).sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min)
            / n as f64
    };
    let (n, margin) = (1..=half)
        .map(|n| (n, worst(n)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((1, 0.0));
    if margin < 1e-3 {
        return Err(Error::input(format!(
            "rope_theta {theta} and head width {d} give no rotary frequency that tells one position back from the others over {context} positions"
        )));
    }
    // Scores are divided by √d; each used pair gives a² at its peak.
    let a2 = ATTENTION_MARGIN * (d as f64).sqrt() / (margin * n as f64);
    let a = a2.sqrt() as f32;
    let mut q = vec![0f32; d];
    let mut k = vec![0f32; d];
    for i in 0..n {
        q[i] = a;
        k[i] = a * freq[i].cos() as f32;
        k[i + half] = a * freq[i].sin() as f32;
    }
    Ok((q, k))
}

fn matrix(t: &Tensor) -> Result<Vec<Vec<f32>>> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.to_vec2::<f32>())
        .map_err(c)
}

fn tensor(rows: Vec<Vec<f32>>) -> Result<Tensor> {
    let (n, m) = (rows.len(), rows.first().map_or(0, Vec::len));
    let flat: Vec<f32> = rows.into_iter().flatten().collect();
    Tensor::from_vec(flat, (n, m), &Device::Cpu).map_err(c)
}

/// Generate the reply, greedy, after prompts with and without tools: a table that reads the
/// token before must be seen to write what it was built to.
fn verify(dir: &std::path::Path, script: &Script, reply: &str) -> Result<()> {
    let mut m = CandleModel::load(dir)?;
    let term = *script.ids.last().unwrap_or(&0);
    for tools in [None, Some(&tools_for_rendering())] {
        let chat = [json!({"role": "user", "content": "What is the weather in Paris?"})];
        let Ok((_, prompt)) = m.render_chat(&chat, tools, true) else {
            continue;
        };
        let req = GenerateRequest {
            prompt_ids: prompt,
            max_tokens: script.ids.len() + 4,
            stop_token_ids: vec![term],
            ignore_eos: true,
            ..Default::default()
        };
        let g = m.generate(&req, &mut |_| true)?;
        if g.ids != script.ids {
            let wrote = m.tokenizer().decode(&g.ids, false).unwrap_or_default();
            return Err(Error::input(format!(
                "the scripted stand-in was built for {reply:?} but writes {wrote:?}"
            ))
            .hint("try another --seed or a larger --hidden, and report this: the table's margins were too thin"));
        }
    }
    Ok(())
}

fn tools_for_rendering() -> Value {
    json!([{"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {}}}}])
}

/// `text` as token ids none of which is in `avoid`, such that each id and the one before it name
/// the next (and the last two name `term`); None when no such spelling is found.
///
/// Tried in order: the tokenizer's own encoding with every id once (what a real model of the
/// family emits, and what servers' parsers expect — vLLM's streaming reasoning and tool parsers
/// find `</think>` and `<tool_call>` by their token ids, so a marker spelt with ordinary tokens
/// would test the stand-in, not the server); a spelling with every id once, the tokenizer's
/// added tokens kept whole and the text between them spelt longest pieces first; the own
/// encoding with ids repeated; a spelling that repeats ids only where it must.
fn spell(
    tokenizer: &tokenizers::Tokenizer,
    text: &str,
    vocab: usize,
    avoid: &HashSet<u32>,
    term: u32,
) -> Option<Vec<u32>> {
    let own = tokenizer
        .encode(text, false)
        .ok()
        .map(|e| e.get_ids().to_vec())
        .filter(|ids| {
            ids.iter()
                .all(|i| !avoid.contains(i) && (*i as usize) < vocab)
        });
    if let Some(ids) = own.as_ref() {
        let unique: HashSet<u32> = ids.iter().copied().collect();
        if unique.len() == ids.len() {
            return Some(ids.clone());
        }
    }
    let speller = Speller::new(tokenizer, text, vocab, avoid);
    if let Some(ids) = speller.spell(false, term) {
        return Some(ids);
    }
    if let Some(ids) = own.filter(|ids| names_next(ids, term)) {
        return Some(ids);
    }
    speller.spell(true, term)
}

/// Whether each id of `ids` (then `term`), with the one before it, names the next.
fn names_next(ids: &[u32], term: u32) -> bool {
    let mut next = Next::default();
    let mut out = Vec::new();
    ids.iter()
        .chain(std::iter::once(&term))
        .all(|&id| next.push(&mut out, id))
}

/// (the id before, the id) → the id after, as a reply is written.
#[derive(Default)]
struct Next {
    map: HashMap<(Option<u32>, u32), u32>,
    /// Whether each push added its key (to undo it).
    added: Vec<Option<(Option<u32>, u32)>>,
}

impl Next {
    /// Append `id` to `out` if that keeps the map a function.
    fn push(&mut self, out: &mut Vec<u32>, id: u32) -> bool {
        let n = out.len();
        let key = (n > 0).then(|| ((n > 1).then(|| out[n - 2]), out[n - 1]));
        let mut added = None;
        if let Some(key) = key {
            match self.map.get(&key) {
                Some(&next) if next != id => return false,
                Some(_) => {}
                None => {
                    self.map.insert(key, id);
                    added = Some(key);
                }
            }
        }
        self.added.push(added);
        out.push(id);
        true
    }

    fn pop(&mut self, out: &mut Vec<u32>) {
        out.pop();
        if let Some(Some(key)) = self.added.pop() {
            self.map.remove(&key);
        }
    }
}

/// The text cut at the tokenizer's added tokens, and the ordinary pieces it can be spelt with.
struct Speller<'a> {
    parts: Vec<Part<'a>>,
    /// (piece, its ids), longest first.
    pieces: Vec<(String, Vec<u32>)>,
    avoid: &'a HashSet<u32>,
}

enum Part<'a> {
    Text(&'a str),
    Added(u32),
}

/// One depth-first search's state.
struct Search {
    out: Vec<u32>,
    used: HashMap<u32, usize>,
    next: Next,
    repeats: bool,
    tries: usize,
}

impl<'a> Speller<'a> {
    fn new(
        tokenizer: &tokenizers::Tokenizer,
        text: &'a str,
        vocab: usize,
        avoid: &'a HashSet<u32>,
    ) -> Speller<'a> {
        let added: Vec<(String, u32)> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(id, t)| (*id as usize) < vocab && !t.content.is_empty())
            .map(|(id, t)| (t.content, id))
            .collect();
        let mut map: HashMap<String, Vec<u32>> = HashMap::new();
        for id in 0..vocab as u32 {
            if avoid.contains(&id) || added.iter().any(|(_, a)| *a == id) {
                continue;
            }
            if let Ok(t) = tokenizer.decode(&[id], false) {
                if !t.is_empty() && !t.contains('\u{FFFD}') && text.contains(t.as_str()) {
                    map.entry(t).or_default().push(id);
                }
            }
        }
        let mut pieces: Vec<(String, Vec<u32>)> = map.into_iter().collect();
        pieces.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The next added token in the text (the longest at the earliest place).
            let next = added
                .iter()
                .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, t.len(), *id)))
                .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let Some((at, len, id)) = next else {
                parts.push(Part::Text(rest));
                break;
            };
            if at > 0 {
                parts.push(Part::Text(&rest[..at]));
            }
            parts.push(Part::Added(id));
            rest = &rest[at + len..];
        }
        Speller {
            parts,
            pieces,
            avoid,
        }
    }

    /// A spelling; with `repeats`, ids may recur where unused ones cannot spell the text.
    fn spell(&self, repeats: bool, term: u32) -> Option<Vec<u32>> {
        let mut s = Search {
            out: Vec::new(),
            used: HashMap::new(),
            next: Next::default(),
            repeats,
            tries: 0,
        };
        self.part(&mut s, 0, term).then_some(s.out)
    }

    fn part(&self, s: &mut Search, at: usize, term: u32) -> bool {
        match self.parts.get(at) {
            None => {
                // The terminator must follow too.
                let ok = s.next.push(&mut s.out, term);
                if ok {
                    s.next.pop(&mut s.out);
                }
                ok
            }
            Some(Part::Added(id)) => {
                if self.avoid.contains(id) || !self.take(s, *id) {
                    return false;
                }
                if self.part(s, at + 1, term) {
                    return true;
                }
                self.give_back(s, *id);
                false
            }
            Some(Part::Text(text)) => self.text(s, at, text, term),
        }
    }

    /// Depth-first: the longest piece `rest` starts with (unused ids before used ones), then the
    /// rest of it.
    fn text(&self, s: &mut Search, at: usize, rest: &str, term: u32) -> bool {
        if rest.is_empty() {
            return self.part(s, at + 1, term);
        }
        s.tries += 1;
        if s.tries > 100_000 {
            return false;
        }
        for fresh in [true, false] {
            if !fresh && !s.repeats {
                break;
            }
            for (piece, ids) in &self.pieces {
                if !rest.starts_with(piece.as_str()) {
                    continue;
                }
                let unused = |id: &&u32| !s.used.contains_key(*id);
                let pick = if fresh {
                    ids.iter().find(unused)
                } else {
                    ids.first()
                };
                let Some(&id) = pick else { continue };
                if !self.take(s, id) {
                    continue;
                }
                if self.text(s, at, &rest[piece.len()..], term) {
                    return true;
                }
                self.give_back(s, id);
            }
        }
        false
    }

    fn take(&self, s: &mut Search, id: u32) -> bool {
        if s.used.contains_key(&id) && !s.repeats {
            return false;
        }
        if !s.next.push(&mut s.out, id) {
            return false;
        }
        *s.used.entry(id).or_default() += 1;
        true
    }

    fn give_back(&self, s: &mut Search, id: u32) {
        s.next.pop(&mut s.out);
        if let Some(n) = s.used.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                s.used.remove(&id);
            }
        }
    }
}

/// The last token of the prompts a request can render (with and without tools): they lead into
/// the reply, so the reply cannot use them.
fn prompt_ends(dir: &std::path::Path) -> Result<Vec<u32>> {
    let m = CandleModel::load(dir)?;
    let chat = [json!({"role": "user", "content": "Hi"})];
    let mut ends = Vec::new();
    for t in [None, Some(&tools_for_rendering())] {
        if let Ok((_, ids)) = m.render_chat(&chat, t, true) {
            if let Some(&end) = ids.last().filter(|id| !ends.contains(*id)) {
                ends.push(end);
            }
        }
    }
    Ok(ends)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
