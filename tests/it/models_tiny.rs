//! The committed, trained fixture models (tools/train): tiny-chat answers its evaluation
//! prompts as trained and stops at <|im_end|>; the GGUF of the same weights gives the same
//! greedy tokens; tiny-base does not answer in format. Expected answers are the training data's
//! (models/eval.json), written by the trainer, not by this code.
use std::path::{Path, PathBuf};

use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::{FinishReason, GenerateRequest, Generation};
use serde_json::{json, Value};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

fn eval() -> Vec<(String, String)> {
    let v: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(models().join("eval.json")).unwrap())
            .unwrap();
    v.iter()
        .map(|e| {
            (
                e["prompt"].as_str().unwrap().to_string(),
                e["answer"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn greedy(model: &mut CandleModel, prompt: &str) -> Generation {
    let (_, ids) = model
        .render_chat(&[json!({"role": "user", "content": prompt})], None, true)
        .unwrap();
    let req = GenerateRequest {
        prompt_ids: ids,
        max_tokens: 32,
        ..Default::default()
    };
    model.generate(&req, &mut |_| true).unwrap()
}

#[test]
fn tiny_chat_answers_its_eval_prompts_and_stops() {
    let mut model = CandleModel::load(&models().join("tiny-chat")).unwrap();
    let cases = eval();
    assert_eq!(cases.len(), 8);
    for (prompt, answer) in cases {
        let g = greedy(&mut model, &prompt);
        assert_eq!(g.text, answer, "prompt {prompt:?}");
        assert_eq!(g.finish_reason, FinishReason::Stop, "prompt {prompt:?}");
        assert_eq!(g.ids.last(), Some(&2), "ends with <|im_end|> (id 2)");
    }
}

#[test]
fn tiny_chat_gguf_and_safetensors_give_the_same_greedy_tokens() {
    let mut st = CandleModel::load(&models().join("tiny-chat")).unwrap();
    let mut gg = CandleModel::load(&models().join("tiny-chat/model.gguf")).unwrap();
    for (prompt, _) in eval() {
        let (a, b) = (greedy(&mut st, &prompt), greedy(&mut gg, &prompt));
        assert_eq!(a.ids, b.ids, "prompt {prompt:?}");
    }
}

#[test]
fn tiny_base_does_not_answer_in_chat_format() {
    let mut base = CandleModel::load(&models().join("tiny-base")).unwrap();
    let mut exact = 0;
    for (prompt, answer) in eval() {
        let g = greedy(&mut base, &prompt);
        exact += usize::from(g.text == answer);
        assert!(
            !g.ids.contains(&2),
            "tiny-base produced <|im_end|> for {prompt:?}: {:?}",
            g.text
        );
    }
    assert_eq!(exact, 0);
}

/// Start the real `chatgate serve` on a free port and return (child, port).
fn serve(model: &Path) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .args([
            "serve",
            "--port",
            "0",
            "--model-name",
            "tiny-chat",
            "--model",
        ])
        .arg(model)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no port in {line:?}"));
    (child, port)
}

/// One non-streamed chat request over a plain loopback socket.
fn chat(port: u16, prompt: &str) -> Value {
    use std::io::{Read, Write};
    let body = json!({"model": "tiny-chat", "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 32}).to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(s, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    serde_json::from_str(resp.split("\r\n\r\n").nth(1).unwrap()).unwrap()
}

#[test]
fn serve_answers_over_http_from_safetensors_and_from_gguf() {
    for model in [
        models().join("tiny-chat"),
        models().join("tiny-chat/model.gguf"),
    ] {
        let (mut child, port) = serve(&model);
        for (prompt, answer) in eval().into_iter().take(3) {
            let v = chat(port, &prompt);
            assert_eq!(
                v["choices"][0]["message"]["content"],
                answer.as_str(),
                "{} {prompt:?}",
                model.display()
            );
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
