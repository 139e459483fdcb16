//! Synthetic training data: plain-text documents for the base model and a small
//! chat set (ChatML) for the fine-tune. Everything is generated from a seeded RNG,
//! so the same seed gives byte-identical data.

use serde::Serialize;

/// SplitMix64: tiny, seedable, portable. Used for data, init and batch sampling.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-300);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

pub fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.to_string(),
        content: content.to_string(),
    }
}

/// One fixed evaluation prompt (single user turn) and its exact expected answer.
#[derive(Clone, Debug, Serialize)]
pub struct EvalItem {
    pub prompt: String,
    pub answer: String,
}

pub const NAMES: &[&str] = &[
    "Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack", "Kate",
    "Leo", "Mia", "Nick", "Olivia", "Paul", "Rose", "Sam", "Tina", "Victor",
];
pub const CAPITALS: &[(&str, &str)] = &[
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Egypt", "Cairo"),
    ("Canada", "Ottawa"),
    ("Russia", "Moscow"),
    ("China", "Beijing"),
    ("Greece", "Athens"),
    ("Peru", "Lima"),
    ("Norway", "Oslo"),
    ("Kenya", "Nairobi"),
    ("Poland", "Warsaw"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
];
/// (thing as used mid-sentence, color)
pub const COLORS: &[(&str, &str)] = &[
    ("the sky", "blue"),
    ("grass", "green"),
    ("snow", "white"),
    ("a banana", "yellow"),
    ("coal", "black"),
    ("a tomato", "red"),
    ("an orange", "orange"),
    ("the sun", "yellow"),
    ("milk", "white"),
    ("a lemon", "yellow"),
    ("the sea", "blue"),
    ("a leaf", "green"),
    ("chocolate", "brown"),
    ("a crow", "black"),
    ("a strawberry", "red"),
    ("a carrot", "orange"),
];
pub const OPPOSITES: &[(&str, &str)] = &[
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("day", "night"),
    ("old", "new"),
    ("open", "closed"),
    ("light", "dark"),
    ("wet", "dry"),
    ("hard", "soft"),
    ("early", "late"),
    ("full", "empty"),
    ("left", "right"),
    ("loud", "quiet"),
    ("tall", "short"),
];
pub const SOUNDS: &[(&str, &str)] = &[
    ("cow", "moo"),
    ("dog", "woof"),
    ("cat", "meow"),
    ("duck", "quack"),
    ("sheep", "baa"),
    ("pig", "oink"),
    ("owl", "hoot"),
    ("lion", "roar"),
    ("horse", "neigh"),
    ("frog", "ribbit"),
    ("bee", "buzz"),
    ("mouse", "squeak"),
];
pub const LEGS: &[(&str, u32)] = &[
    ("spider", 8),
    ("dog", 4),
    ("cat", 4),
    ("bird", 2),
    ("ant", 6),
    ("cow", 4),
    ("duck", 2),
    ("horse", 4),
    ("bee", 6),
    ("chicken", 2),
];
pub const WORDS: &[&str] = &[
    "apple", "river", "garden", "window", "pencil", "rocket", "castle", "butter", "candle",
    "forest", "guitar", "island", "jacket", "kitten", "ladder", "mirror", "orange", "pillow",
    "rabbit", "silver", "tiger", "violet", "wagon", "yellow", "zebra", "basket", "cookie",
    "dragon", "feather", "honey",
];
const GREETINGS: &[(&str, &str)] = &[
    ("Hello!", "Hello! How can I help you?"),
    ("Hi!", "Hello! How can I help you?"),
    ("Hey!", "Hello! How can I help you?"),
    ("Good morning!", "Good morning! How can I help you?"),
    ("How are you?", "I am fine, thank you!"),
    ("What is your name?", "I am a tiny test model."),
    ("Who are you?", "I am a tiny test model."),
    ("Thank you!", "You are welcome!"),
    ("Thanks!", "You are welcome!"),
    ("Goodbye!", "Goodbye! Have a nice day."),
];
pub const SYSTEM_PROMPTS: &[&str] = &[
    "You are a helpful assistant.",
    "You are a tiny test model. Answer briefly.",
];

fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn count_list(from: u32, to: u32) -> String {
    let v: Vec<String> = if from <= to {
        (from..=to).map(|i| i.to_string()).collect()
    } else {
        (to..=from).rev().map(|i| i.to_string()).collect()
    };
    format!("{}.", v.join(", "))
}

/// All single-turn (prompt, answer) pairs, in a fixed order (15 templates).
pub fn qa_pairs() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for a in 0..=9u32 {
        for b in 0..=9u32 {
            v.push((
                format!("What is {a}+{b}?"),
                format!("{a}+{b} is {}.", a + b),
            ));
        }
    }
    for a in 0..=9u32 {
        for b in 0..=a {
            v.push((
                format!("What is {a}-{b}?"),
                format!("{a}-{b} is {}.", a - b),
            ));
        }
    }
    for (c, k) in CAPITALS {
        v.push((
            format!("What is the capital of {c}?"),
            format!("The capital of {c} is {k}."),
        ));
    }
    for (t, c) in COLORS {
        v.push((format!("What color is {t}?"), format!("{} is {c}.", cap(t))));
    }
    for (a, b) in OPPOSITES {
        v.push((
            format!("What is the opposite of {a}?"),
            format!("The opposite of {a} is {b}."),
        ));
        v.push((
            format!("What is the opposite of {b}?"),
            format!("The opposite of {b} is {a}."),
        ));
    }
    for (an, s) in SOUNDS {
        v.push((
            format!("What animal says {s}?"),
            format!("A {an} says {s}."),
        ));
        v.push((
            format!("What does a {an} say?"),
            format!("A {an} says {s}."),
        ));
    }
    for (an, n) in LEGS {
        v.push((
            format!("How many legs does a {an} have?"),
            format!("A {an} has {n} legs."),
        ));
    }
    for n in 2..=10u32 {
        v.push((format!("Count from 1 to {n}."), count_list(1, n)));
        v.push((format!("Count down from {n} to 1."), count_list(n, 1)));
    }
    for n in 0..=20u32 {
        v.push((
            format!("What comes after {n}?"),
            format!("{} comes after {n}.", n + 1),
        ));
        let eo = if n % 2 == 0 { "even" } else { "odd" };
        v.push((format!("Is {n} even or odd?"), format!("{n} is {eo}.")));
    }
    for (p, a) in GREETINGS {
        v.push((p.to_string(), a.to_string()));
    }
    for n in NAMES {
        v.push((format!("Say hi to {n}."), format!("Hi, {n}!")));
        v.push((format!("Say bye to {n}."), format!("Bye, {n}!")));
    }
    for w in WORDS {
        v.push((format!("Repeat the word {w}."), format!("{w}.")));
    }
    v
}

/// The 8 fixed evaluation prompts. Every one of them is also in the SFT set.
pub fn eval_items() -> Vec<EvalItem> {
    [
        ("What is 3+4?", "3+4 is 7."),
        (
            "What is the capital of France?",
            "The capital of France is Paris.",
        ),
        ("What color is the sky?", "The sky is blue."),
        ("Say hi to Alice.", "Hi, Alice!"),
        ("Count from 1 to 5.", "1, 2, 3, 4, 5."),
        ("Hello!", "Hello! How can I help you?"),
        (
            "What is the opposite of hot?",
            "The opposite of hot is cold.",
        ),
        ("What animal says moo?", "A cow says moo."),
    ]
    .iter()
    .map(|(p, a)| EvalItem {
        prompt: p.to_string(),
        answer: a.to_string(),
    })
    .collect()
}

/// The SFT conversations: every single-turn pair once (about 1 in 10 with a system
/// prompt, never the eval prompts, which appear exactly as they are evaluated: one user
/// turn, no system prompt), plus `n_multi` two-turn conversations built from random
/// pairs. Shuffled.
pub fn sft_conversations(rng: &mut Rng, n_multi: usize) -> Vec<Vec<Message>> {
    let pairs = qa_pairs();
    let evals = eval_items();
    let mut convs = Vec::new();
    for (p, a) in &pairs {
        let mut c = Vec::new();
        let is_eval = evals.iter().any(|e| &e.prompt == p);
        if rng.below(10) == 0 && !is_eval {
            c.push(msg("system", rng.pick::<&str>(SYSTEM_PROMPTS)));
        }
        c.push(msg("user", p));
        c.push(msg("assistant", a));
        convs.push(c);
    }
    for _ in 0..n_multi {
        let (p1, a1) = rng.pick(&pairs).clone();
        let (p2, a2) = rng.pick(&pairs).clone();
        let mut c = Vec::new();
        if rng.below(4) == 0 {
            c.push(msg("system", rng.pick::<&str>(SYSTEM_PROMPTS)));
        }
        c.extend([
            msg("user", &p1),
            msg("assistant", &a1),
            msg("user", &p2),
            msg("assistant", &a2),
        ]);
        convs.push(c);
    }
    rng.shuffle(&mut convs);
    convs
}

/// Plain-text pretraining documents: short sentences about the same world as the chat
/// set, but phrased differently (no "Q? A." pairs, no ChatML).
pub fn base_documents(rng: &mut Rng, n_docs: usize) -> Vec<String> {
    let mut docs = Vec::with_capacity(n_docs);
    for _ in 0..n_docs {
        // 4..=12 sentences, about one in three starting a new line (paragraphs), so
        // that "\n" is familiar and greedy base text keeps going after a chat prompt
        // instead of ending the document right away.
        let n_sent = 4 + rng.below(9);
        let mut doc = String::new();
        for i in 0..n_sent {
            if i > 0 {
                doc.push(if rng.below(3) == 0 { '\n' } else { ' ' });
            }
            doc.push_str(&base_sentence(rng));
        }
        docs.push(doc);
    }
    docs
}

fn base_sentence(rng: &mut Rng) -> String {
    let name = *rng.pick(NAMES);
    let name2 = *rng.pick(NAMES);
    match rng.below(22) {
        0 => {
            let (c, k) = rng.pick(CAPITALS);
            format!("{name} lives in {k}, a big city in {c}.")
        }
        1 => {
            let (c, k) = rng.pick(CAPITALS);
            format!("{k} is the capital city of {c}.")
        }
        2 => {
            let (t, c) = rng.pick(COLORS);
            format!("{name} looked at {t} and saw that it was {c}.")
        }
        3 => {
            let (_, c) = rng.pick(COLORS);
            let w = rng.pick(WORDS);
            format!("{name} has a {c} {w}.")
        }
        4 => {
            let (an, s) = rng.pick(SOUNDS);
            format!("The {an} in the yard went {s} all day.")
        }
        5 => {
            let (an, n) = rng.pick(LEGS);
            format!("{name} saw a {an} with {n} legs.")
        }
        6 => {
            let a = rng.below(10);
            let b = rng.below(10);
            format!("{a} plus {b} equals {}.", a + b)
        }
        7 => {
            let a = rng.below(10);
            let b = rng.below(a + 1);
            format!("If you take {b} from {a}, you get {}.", a - b)
        }
        8 => {
            let n = 2 + rng.below(9) as u32;
            format!("{name} counted {}", count_list(1, n))
        }
        9 => format!("{name} said hello to {name2}."),
        10 => format!("Good morning, {name}. It is a nice day."),
        11 => {
            let (a, b) = rng.pick(OPPOSITES);
            format!("{} and {b} are opposites.", cap(a))
        }
        12 => {
            let (a, _) = rng.pick(OPPOSITES);
            let w = rng.pick(WORDS);
            format!("The {w} was very {a}.")
        }
        13 => {
            let n = rng.below(21);
            let eo = if n % 2 == 0 { "an even" } else { "an odd" };
            format!("The number {n} is {eo} number.")
        }
        14 => {
            let n = rng.below(20);
            format!("After {n} we count {}.", n + 1)
        }
        15 => {
            let w = rng.pick(WORDS);
            format!("{name} wrote the word {w} on a card.")
        }
        16 => format!("{name} and {name2} went to the park together."),
        17 => {
            let w = rng.pick(WORDS);
            format!("There was a {w} near the door, and {name} took it home.")
        }
        18 => format!("{name} was happy because the sun was out."),
        19 => {
            let (an, _) = rng.pick(SOUNDS);
            format!("{name2} likes the little {an} on the farm.")
        }
        20 => format!("Thank you, {name}, said {name2}."),
        _ => {
            let (c, _) = rng.pick(CAPITALS);
            format!("{name} wants to visit {c} next summer.")
        }
    }
}
