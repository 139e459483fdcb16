//! The file-level fault classes of BUG-ZOO.md, each built as a temporary broken copy of a real
//! model directory, must fail `chatgate check` at the right boundary and check; the healthy
//! copy must pass. Runs the real binary.
use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml")
}

/// A temp folder with a copy of the fixture model (`model/`) and a suite over it.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new(suite_extra: &str) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        fs::create_dir(&model).unwrap();
        for e in fs::read_dir(fixture()).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), model.join(e.file_name())).unwrap();
        }
        let suite = format!(
            "[model]\ndir = \"model\"\n{suite_extra}\n[sft]\ngolden = \"model/sft.jsonl\"\n\n[generation]\ntemperature = 0.7\ntop_p = 0.9\n"
        );
        fs::write(dir.path().join("suite.toml"), suite).unwrap();
        let c = Case { dir };
        let out = c.run(&["lock"]);
        assert_eq!(out.0, 0, "lock failed: {}", out.2);
        c
    }
    fn model(&self, file: &str) -> PathBuf {
        self.dir.path().join("model").join(file)
    }
    fn suite(&self) -> PathBuf {
        self.dir.path().join("suite.toml")
    }
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::cargo_bin("chatgate").unwrap();
        cmd.args(args).arg(self.suite());
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }
    /// `check --format json`: (exit code, report).
    fn check(&self) -> (i32, Value) {
        let (code, stdout, stderr) = self.run(&["check", "--format", "json"]);
        let v: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {stderr}"));
        (code, v)
    }
    fn edit_json(&self, file: &str, f: impl FnOnce(&mut Value)) {
        let p = self.model(file);
        let mut v: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
}

use crate::common::report_json::errors;

/// Assert the run failed (exit 1) and the first broken link is `boundary`/`check`.
fn assert_first_broken(case: &Case, boundary: &str, check: &str) -> Value {
    let (code, report) = case.check();
    assert_eq!(code, 1, "expected exit 1; errors: {:?}", errors(&report));
    assert_eq!(report["verdict"], "fail");
    let first = &report["first_broken"];
    assert_eq!(
        (
            first["boundary"].as_str().unwrap(),
            first["check"].as_str().unwrap()
        ),
        (boundary, check),
        "errors: {:?}",
        errors(&report)
    );
    report
}

fn finding<'a>(report: &'a Value, check: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check && f["severity"] == "error")
        .unwrap_or_else(|| panic!("no error finding {check}"))
}

#[test]
fn healthy_copy_passes_with_no_error_and_no_warning() {
    let case = Case::new("");
    let (code, report) = case.check();
    assert_eq!(code, 0, "errors: {:?}", errors(&report));
    assert_eq!(report["verdict"], "pass");
    let checks: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "pass")
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    for must in [
        "checkpoint.weights-hash",
        "tokenizer.fingerprint",
        "tokenizer.golden-reencode",
        "template.parity",
        "template.bos-count",
        "template.generation-prompt",
        "generation.stop-set",
        "generation.stop-inside-reply",
        "generation.defaults",
    ] {
        assert!(checks.contains(&must), "{must} did not pass: {checks:?}");
    }
    // The fixture's template concatenates `message['content']`: it raises on `content: null`
    // and on content-part lists, which a client may send — transformers 5.23's
    // apply_chat_template raises on both too (UndefinedError, "can only concatenate str (not
    // \"list\") to str"), checked by hand. Those are the
    // only warnings; its lack of tool support is information, not a warning.
    let warnings: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "warning")
        .map(|f| {
            format!(
                "{}:{}",
                f["check"].as_str().unwrap(),
                f["evidence"]["shape"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        warnings,
        [
            "template.message-shapes:content-null",
            "template.message-shapes:content-parts"
        ],
        "a healthy copy raises other warnings"
    );
}

#[test]
fn flipped_byte_in_weights_is_a_checkpoint_fault() {
    let case = Case::new("");
    let p = case.model("model.safetensors");
    let mut bytes = fs::read(&p).unwrap();
    let i = bytes.len() - 100; // inside the tensor data, past the header
    bytes[i] ^= 0x01;
    fs::write(&p, bytes).unwrap();
    let report = assert_first_broken(&case, "checkpoint", "checkpoint.weights-hash");
    let f = finding(&report, "checkpoint.weights-hash");
    assert!(
        f["evidence"]["changed"]
            .as_str()
            .unwrap()
            .contains("model.safetensors"),
        "{f}"
    );
}

#[test]
fn swapped_tokenizer_is_a_tokenizer_fault() {
    let case = Case::new("");
    fs::copy(
        fixture().join("../swapped-tokenizer.json"),
        case.model("tokenizer.json"),
    )
    .unwrap();
    let report = assert_first_broken(&case, "tokenizer", "tokenizer.fingerprint");
    // The SFT ids no longer come back from the serving tokenizer either.
    finding(&report, "tokenizer.golden-reencode");
}

#[test]
fn double_bos_is_a_template_fault() {
    // The server tokenizes the rendered prompt with the tokenizer's own special tokens (as
    // llama.cpp does), and a re-saved tokenizer.json now adds a BOS of its own: the template
    // already renders one (llama-cpp-python#1501).
    let case = Case::new("add_special_tokens = true");
    assert_eq!(
        case.check().0,
        0,
        "healthy copy with add_special_tokens must pass"
    );
    case.edit_json("tokenizer.json", |t| {
        t["post_processor"] = serde_json::json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}
        });
    });
    let report = assert_first_broken(&case, "template", "template.bos-count");
    assert_eq!(
        finding(&report, "template.bos-count")["evidence"]["class"],
        "double-bos"
    );
    assert_eq!(
        finding(&report, "template.parity")["evidence"]["class"],
        "double-bos"
    );
}

#[test]
fn llama2_template_instead_of_chatml_is_a_template_fault() {
    let case = Case::new("");
    let llama2 = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";
    case.edit_json("tokenizer_config.json", |t| {
        t["chat_template"] = Value::String(llama2.into())
    });
    let report = assert_first_broken(&case, "template", "template.parity");
    assert_eq!(
        finding(&report, "template.parity")["evidence"]["class"],
        "role-format"
    );
}

#[test]
fn chat_template_jinja_takes_precedence_and_is_checked() {
    // transformers loads chat_template.jinja over tokenizer_config.json: a stale .jinja left in
    // the directory silently changes the format.
    let case = Case::new("");
    let no_gen_prompt = "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}";
    fs::write(case.model("chat_template.jinja"), no_gen_prompt).unwrap();
    let report = assert_first_broken(&case, "template", "template.generation-prompt");
    assert_eq!(
        finding(&report, "template.generation-prompt")["evidence"]["class"],
        "generation-prompt"
    );
}

#[test]
fn eos_missing_from_stop_set_is_a_generation_config_fault() {
    // The chat model's files still name the base model's eos (vllm#4180): the turn ends with
    // <|im_end|>, the server stops on </s>.
    let case = Case::new("");
    case.edit_json("generation_config.json", |g| {
        g["eos_token_id"] = serde_json::json!([1])
    });
    case.edit_json("tokenizer_config.json", |t| {
        t["eos_token"] = Value::String("</s>".into())
    });
    case.edit_json("special_tokens_map.json", |t| {
        t["eos_token"] = Value::String("</s>".into())
    });
    let report = assert_first_broken(&case, "generation-config", "generation.stop-set");
    let f = finding(&report, "generation.stop-set");
    assert!(
        f["evidence"]["turn terminator"]
            .as_str()
            .unwrap()
            .contains("<|im_end|>"),
        "{f}"
    );
}

#[test]
fn stop_token_inside_replies_is_a_generation_config_fault() {
    // A stop list that includes a token the assistant is trained to say (ollama#17939).
    let case = Case::new("");
    case.edit_json("generation_config.json", |g| {
        g["eos_token_id"] = serde_json::json!([3, 15])
    });
    let report = assert_first_broken(&case, "generation-config", "generation.stop-inside-reply");
    assert!(
        finding(&report, "generation.stop-inside-reply")["evidence"]["token"]
            .as_str()
            .unwrap()
            .contains('+')
    );
}

#[test]
fn changed_sampling_defaults_are_a_generation_config_fault() {
    let case = Case::new("");
    case.edit_json("generation_config.json", |g| {
        g["temperature"] = serde_json::json!(0.1)
    });
    let report = assert_first_broken(&case, "generation-config", "generation.defaults");
    assert!(
        finding(&report, "generation.defaults")["evidence"]["temperature"]
            .as_str()
            .unwrap()
            .contains("0.1")
    );
}

#[test]
fn lock_is_not_replaced_without_update() {
    let case = Case::new("");
    let lock = case.dir.path().join("suite.lock.json");
    let before = fs::read(&lock).unwrap();
    let p = case.model("model.safetensors");
    let mut bytes = fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff;
    fs::write(&p, bytes).unwrap();
    let (code, stdout, stderr) = case.run(&["lock"]);
    assert_eq!(code, 1);
    assert!(stdout.contains("model.safetensors changed"), "{stdout}");
    assert!(stderr.contains("--update"), "{stderr}");
    assert_eq!(
        fs::read(&lock).unwrap(),
        before,
        "the lock changed without --update"
    );
    let (code, _, _) = case.run(&["lock", "--update"]);
    assert_eq!(code, 0);
    assert_ne!(fs::read(&lock).unwrap(), before);
    assert_eq!(case.check().0, 0);
}

/// A case whose SFT side is a template file (the fixture's own ChatML template) instead of ids.
fn template_case(serving_template: &str) -> Case {
    let case = Case::new("");
    let tc: Value =
        serde_json::from_str(&fs::read_to_string(case.model("tokenizer_config.json")).unwrap())
            .unwrap();
    fs::write(
        case.dir.path().join("sft.jinja"),
        tc["chat_template"].as_str().unwrap(),
    )
    .unwrap();
    let suite = "[model]\ndir = \"model\"\n\n[sft]\ntemplate = \"sft.jinja\"\n\n[[conversations]]\nid = \"sys\"\nmessages = [{ role = \"system\", content = \"Be brief.\" }, { role = \"user\", content = \"Hi\" }, { role = \"assistant\", content = \"Hello.\" }]\n\n[[conversations]]\nid = \"plain\"\nmessages = [{ role = \"user\", content = \"What is 2+2?\" }, { role = \"assistant\", content = \"4.\" }]\n";
    fs::write(case.suite(), suite).unwrap();
    assert_eq!(
        case.check().0,
        0,
        "the SFT template against itself must pass"
    );
    fs::write(case.model("chat_template.jinja"), serving_template).unwrap();
    case
}

#[test]
fn whitespace_only_difference_is_classified() {
    // An extra newline after each turn: invisible in a chat UI, different ids for the model.
    let case = template_case("{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    let report = assert_first_broken(&case, "template", "template.parity");
    assert_eq!(
        finding(&report, "template.parity")["evidence"]["class"],
        "whitespace"
    );
}

#[test]
fn injected_default_system_prompt_is_classified() {
    // Qwen-style: a default system prompt when the conversation has none.
    let case = template_case("{{ bos_token }}{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant made by Example Corp.<|im_end|>\\n' }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    let report = assert_first_broken(&case, "template", "template.parity");
    let f = finding(&report, "template.parity");
    assert_eq!(f["evidence"]["class"], "system-prompt", "{f}");
    assert_eq!(f["evidence"]["first conversation"], "plain");
}

#[test]
fn dropped_system_message_is_classified() {
    let case = template_case("{{ bos_token }}{% for message in messages %}{% if message['role'] != 'system' %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    let report = assert_first_broken(&case, "template", "template.parity");
    assert_eq!(
        finding(&report, "template.parity")["evidence"]["class"],
        "system-prompt"
    );
}

#[test]
fn lost_special_token_is_a_tokenizer_fault_with_split_tokens_in_the_template() {
    // tokenizer.json lost <|im_end|> as an added token (a broken re-save): the text renders the
    // same, but the model now sees it spelled out in pieces.
    let case = Case::new("");
    case.edit_json("tokenizer.json", |t| {
        let added = t["added_tokens"].as_array_mut().unwrap();
        added.retain(|a| a["content"] != "<|im_end|>");
        t["model"]["vocab"]
            .as_object_mut()
            .unwrap()
            .remove("<|im_end|>");
    });
    let report = assert_first_broken(&case, "tokenizer", "tokenizer.fingerprint");
    finding(&report, "tokenizer.special-tokens");
    assert_eq!(
        finding(&report, "template.parity")["evidence"]["class"],
        "special-token-split"
    );
}

#[test]
fn missing_generation_prompt_is_caught_against_an_sft_template() {
    // The serving template forgets the assistant header for add_generation_prompt.
    let case = template_case("{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}");
    let report = assert_first_broken(&case, "template", "template.generation-prompt");
    let f = finding(&report, "template.generation-prompt-suffix");
    assert_eq!(f["evidence"]["class"], "generation-prompt");
    assert_eq!(f["evidence"]["sft appends"], "\"<|im_start|>assistant\\n\"");
}

/// models/tiny-chat ships a GGUF whose template is the HF template without its
/// `{% generation %}` tags: the texts differ, the renders do not, so that is information, not a
/// warning. A GGUF template that renders differently is a warning naming the first conversation.
#[test]
fn gguf_vs_hf_template_compares_renders_not_texts() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    fs::create_dir(&model).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat");
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    fs::write(
        dir.path().join("suite.toml"),
        "[model]\ndir = \"model\"\n[sft]\ngolden = \"model/sft.jsonl\"\n",
    )
    .unwrap();
    let c = Case { dir };
    let gguf_vs_hf = |c: &Case| -> Value {
        let (_, report) = c.check();
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == "template.gguf-vs-hf")
            .cloned()
            .unwrap_or_else(|| panic!("no template.gguf-vs-hf finding: {report}"))
    };
    let f = gguf_vs_hf(&c);
    assert_eq!(f["severity"], "info", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("render the same text"),
        "{f}"
    );

    c.edit_json("tokenizer_config.json", |v| {
        let t = v["chat_template"].as_str().unwrap().to_string();
        v["chat_template"] = Value::String(format!(
            "{{{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}}}{t}"
        ));
    });
    let f = gguf_vs_hf(&c);
    assert_eq!(f["severity"], "warning", "{f}");
    assert!(
        f["evidence"]["first difference"]
            .as_str()
            .is_some_and(|d| d.contains("add_generation_prompt = false")),
        "{f}"
    );
}
