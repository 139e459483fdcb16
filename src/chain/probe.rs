//! The fixed probe corpus behind the tokenizer's semantic fingerprint and round-trip check.
//! Changing a string here changes every fingerprint: bump PROBE_VERSION when you do, so old
//! locks say "probe changed" instead of "tokenizer changed".

pub const PROBE_VERSION: u32 = 1;

/// Strings chosen where tokenizers differ: unicode and normalization, whitespace runs, digits
/// (split rules differ between Llama-3, Qwen and GPT-2), code, and text that looks like special
/// tokens followed by spaces and newlines (llama.cpp#23840, #7094).
pub const PROBE_CORPUS: &[&str] = &[
    "Hello world",
    " Hello world",
    "Hello  world   with    runs",
    "\n\n\ttabs\tand\nnewlines\r\n",
    "    indented code",
    "naïve café — 日本語のテキスト 🤖 ∑ x² ≠ y",
    "Ünïcödé NFC vs NFD: e\u{301} é",
    "ضمن العربية и кириллица",
    "1234567890 3.14159 1,000,000 2024-11-22",
    "x=1; y = x**2 // 3 % 7",
    "def f(x):\n    return {\"a\": [1, 2, 3]}\n",
    "fn main() { println!(\"{}\", 42); }",
    "<|im_start|>user\nhi<|im_end|>",
    "<s> [INST] hi [/INST]</s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|> after special",
    "</s> space after eos",
    "<s>\nnewline after bos",
    "<think>\nreasoning\n</think>\n\nanswer",
    "'quotes' \"double\" `back` it's don't",
    "URLs https://example.com/a?b=c&d=e#f",
    "emoji 👩‍👩‍👧 flags 🇫🇷 zwj",
];
