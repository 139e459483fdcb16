//! The pre-tokenizer llama.cpp's HF→GGUF converter names a BPE tokenizer with
//! (`tokenizer.ggml.pre`), computed as the converter computes it.
//!
//! `get_vocab_base_pre` hashes `str(AutoTokenizer.from_pretrained(dir).encode(chktxt))` — the
//! ids *with special tokens added* — and looks the sha256 up in a generated table. The table
//! (`llama_cpp_pre_hashes.tsv`, every entry of the converter's, with its commit) and the check
//! text (`llama_cpp_chktxt.txt`) are generated from llama.cpp's source by
//! `scripts/fixtures/gen_llama_cpp_pre_table.py`. Entries were registered under transformers
//! 4, whose `LlamaTokenizerFast` adds the BOS `tokenizer_config.json`'s `add_bos_token` asks
//! for whatever tokenizer.json's post-processor says (DeepSeek-V3: a ByteLevel post-processor,
//! `add_bos_token: true`); transformers 5 loads such a tokenizer as it is and adds none. Both
//! lists are tried, the one with the flag's BOS first.
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The converter's check text.
pub const CHKTXT: &str = include_str!("llama_cpp_chktxt.txt");
const TABLE: &str = include_str!("llama_cpp_pre_hashes.tsv");

/// The `(hash, name)` entries, in source order.
fn entries() -> impl Iterator<Item = (&'static str, &'static str)> {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once('\t'))
}

/// The converter's name for a hash: its chain is independent `if`s, so the last entry wins.
pub fn name_of(hash: &str) -> Option<&'static str> {
    entries().filter(|(h, _)| *h == hash).last().map(|(_, n)| n)
}

/// How many entries the table has (for messages).
pub fn known() -> usize {
    entries().count()
}

/// The commit of llama.cpp the table was generated from.
pub fn commit() -> &'static str {
    TABLE
        .lines()
        .find_map(|l| l.strip_prefix("# commit:"))
        .map(str::trim)
        .unwrap_or("unknown")
}

/// sha256 of the ids as Python prints a list: `[1, 2, 3]`.
pub fn chkhsh(ids: &[u32]) -> String {
    let listed = format!(
        "[{}]",
        ids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    hex::encode(Sha256::digest(listed.as_bytes()))
}

/// A token named in tokenizer_config.json (a string or an AddedToken dict), as an id.
fn config_token_id(tok: &tokenizers::Tokenizer, tc: &Value, key: &str) -> Option<u32> {
    let v = &tc[key];
    let text = v.as_str().or_else(|| v["content"].as_str())?;
    tok.token_to_id(text)
}

/// The id lists the converter may have hashed for this tokenizer: with the BOS/EOS that
/// `add_bos_token`/`add_eos_token` ask for (transformers 4's `LlamaTokenizerFast`), then as
/// tokenizer.json's post-processor alone gives them (transformers 5).
pub fn checked_ids(
    tok: &tokenizers::Tokenizer,
    tokenizer_config: Option<&Value>,
) -> Result<Vec<Vec<u32>>, String> {
    let plain = tok
        .encode(CHKTXT, true)
        .map_err(|e| e.to_string())?
        .get_ids()
        .to_vec();
    let mut flagged = plain.clone();
    if let Some(tc) = tokenizer_config {
        if tc["add_bos_token"] == true {
            if let Some(bos) = config_token_id(tok, tc, "bos_token") {
                if flagged.first() != Some(&bos) {
                    flagged.insert(0, bos);
                }
            }
        }
        if tc["add_eos_token"] == true {
            if let Some(eos) = config_token_id(tok, tc, "eos_token") {
                if flagged.last() != Some(&eos) {
                    flagged.push(eos);
                }
            }
        }
    }
    Ok(if flagged == plain {
        vec![plain]
    } else {
        vec![flagged, plain]
    })
}

/// The converter's `tokenizer.ggml.pre` for this tokenizer, or why it refuses it (the converter
/// raises "BPE pre-tokenizer was not recognized" and writes no GGUF).
pub fn identify(
    tok: &tokenizers::Tokenizer,
    tokenizer_config: Option<&Value>,
) -> Result<String, String> {
    let lists = checked_ids(tok, tokenizer_config)?;
    let hashes: Vec<String> = lists.iter().map(|ids| chkhsh(ids)).collect();
    if let Some(name) = hashes.iter().find_map(|h| name_of(h)) {
        return Ok(name.to_string());
    }
    Err(format!(
        "llama.cpp's converter (at {}) does not recognise this BPE pre-tokenizer and refuses to convert it: chkhsh {} is none of its {} entries",
        &commit()[..commit().len().min(12)],
        hashes.join(" (with the add_bos_token BOS) / "),
        known()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tokenizer(rel: &str) -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_file(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
            .expect("tokenizer")
    }

    #[test]
    fn the_table_is_the_converters_whole_chain() {
        assert!(known() >= 90, "{} entries", known());
        assert_eq!(commit().len(), 40, "{}", commit());
        // Repeated hashes: the converter's later `if` wins.
        assert_eq!(
            name_of("0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"),
            Some("jina-v2-en")
        );
        assert_eq!(name_of("0000"), None);
        assert!(CHKTXT.starts_with("\n \n\n") && CHKTXT.ends_with("We'Ve a'lL"));
    }

    /// The hashes of the corpus's byte-level BPE tokenizers are the converter's own entries for
    /// them (Qwen2.5 → qwen2, SmolLM2 → smollm), as the converter names them.
    #[test]
    fn corpus_tokenizers_get_the_converters_names() {
        for (rel, want) in [
            ("tests/corpus/models/Qwen2.5-0.5B-Instruct", "qwen2"),
            ("tests/corpus/models/SmolLM2-135M-Instruct", "smollm"),
        ] {
            let tok = tokenizer(&format!("{rel}/tokenizer.json"));
            let tc = std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(rel)
                    .join("tokenizer_config.json"),
            )
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            assert_eq!(identify(&tok, tc.as_ref()).as_deref(), Ok(want), "{rel}");
        }
    }

    /// DeepSeek-V3's tokenizer.json adds no BOS; its tokenizer_config.json asks for one. The
    /// converter's `deepseek-v3` entry is the hash with it (transformers 4); without it the ids
    /// hash to another model's later entry on the same tokenizer (registered under
    /// transformers 5).
    #[test]
    fn deepseek_v3_is_named_with_the_bos_its_config_asks_for() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/models/DeepSeek-V3");
        let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        let tc: Value =
            serde_json::from_slice(&std::fs::read(dir.join("tokenizer_config.json")).unwrap())
                .unwrap();
        assert_eq!(identify(&tok, Some(&tc)).as_deref(), Ok("deepseek-v3"));
        let lists = checked_ids(&tok, Some(&tc)).unwrap();
        assert_eq!(lists[0][0], 0, "<｜begin▁of▁sentence｜> first");
        assert_eq!(
            chkhsh(&lists[0]),
            "877081d19cf6996e2c4ff0e1236341e9b7bde288f5311a56a937f0afbbb3aeb5"
        );
        assert_eq!(name_of(&chkhsh(&lists[1])), Some("joyai-llm"));
    }

    #[test]
    fn the_bos_the_flag_asks_for_is_tried_first() {
        let tok = tokenizer("tests/corpus/models/Qwen2.5-0.5B-Instruct/tokenizer.json");
        let tc =
            serde_json::json!({"add_bos_token": true, "bos_token": {"content": "<|endoftext|>"}});
        let lists = checked_ids(&tok, Some(&tc)).unwrap();
        assert_eq!(lists.len(), 2);
        assert_eq!(lists[0][0], tok.token_to_id("<|endoftext|>").unwrap());
        assert_eq!(&lists[0][1..], &lists[1][..]);
        // With a BOS Qwen never adds, the first list is unknown and the second still names it.
        assert_eq!(identify(&tok, Some(&tc)).as_deref(), Ok("qwen2"));
    }
}
