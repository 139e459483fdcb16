//! What a server reveals about itself: its optional routes (tokenize, templates, props, info),
//! the stack they name, and the server's own token ids for a chat or a text.
use super::*;

/// Which optional endpoints a server has, and what the ones later checks read returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Introspection {
    /// Any probe got an HTTP answer.
    pub reachable: bool,
    /// `GET /health` answered 2xx.
    pub health: bool,
    /// `GET /v1/models`.
    pub models: Option<Value>,
    /// llama.cpp `GET /props` (chat_template, bos/eos, default generation settings).
    pub props: Option<Value>,
    /// TGI `GET /info`.
    pub info: Option<Value>,
    /// vLLM/SGLang `POST /tokenize` with `messages`.
    pub vllm_tokenize: bool,
    /// llama.cpp `POST /tokenize` with `content`.
    pub llamacpp_tokenize: bool,
    /// llama.cpp `POST /apply-template`.
    pub apply_template: bool,
    /// TGI `POST /chat_tokenize`.
    pub tgi_chat_tokenize: bool,
    /// llama-cpp-python `POST /extras/tokenize`.
    pub extras_tokenize: bool,
}

impl Introspection {
    /// The stack a server runs, from the routes it answers (llama-cpp-python's `/extras/tokenize`,
    /// llama.cpp's `/props` and `/apply-template`, TGI's `/info` and `/chat_tokenize`, vLLM and
    /// SGLang's chat `/tokenize`), with the evidence. None when nothing tells.
    pub fn stack(&self) -> Option<(Stack, String)> {
        use crate::stack::profile::{detect, Route};
        detect(|route| match route {
            Route::ExtrasTokenize => self.extras_tokenize,
            Route::ApplyTemplate => self.apply_template,
            Route::LlamaCppProps => self.props.as_ref().is_some_and(|p| {
                p.get("default_generation_settings").is_some() || p.get("chat_template").is_some()
            }),
            Route::TgiChatTokenize => self.tgi_chat_tokenize,
            Route::TgiInfo => self.info.as_ref().is_some_and(|i| {
                i.get("model_id").is_some() && i.get("max_input_tokens").is_some()
            }),
            Route::ChatTokenize => self.vllm_tokenize,
        })
    }
}

impl HttpTarget {
    /// Probe the optional endpoints once (cached; later calls return the first answer).
    pub async fn introspect(&self) -> Introspection {
        self.inner
            .introspection
            .get_or_init(|| self.probe_all())
            .await
            .clone()
    }

    pub(super) async fn probe_all(&self) -> Introspection {
        let model = &self.inner.opts.model;
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let vllm_body = json!({"model": model, "messages": msgs,
            "add_generation_prompt": true, "add_special_tokens": false});
        let tgi_body = json!({"model": model, "messages": msgs});
        let apply_body = json!({"messages": msgs});
        let extras_body = json!({"input": "hi"});
        let (health, models, props, info, vllm, apply, tgi, extras) = futures_util::join!(
            self.get("/health"),
            self.get("/v1/models"),
            self.get("/props"),
            self.get("/info"),
            self.post_json("/tokenize", &vllm_body),
            self.post_json("/apply-template", &apply_body),
            self.post_json("/chat_tokenize", &tgi_body),
            self.post_json("/extras/tokenize", &extras_body),
        );
        let all = [
            &health, &models, &props, &info, &vllm, &apply, &tgi, &extras,
        ];
        let mut out = Introspection {
            reachable: all.iter().any(|r| r.is_ok()),
            health: ok_json(&health).is_some() || ok_status(&health),
            models: ok_json(&models),
            props: ok_json(&props),
            info: ok_json(&info),
            vllm_tokenize: ok_json(&vllm)
                .as_ref()
                .and_then(ids_at_tokens)
                .is_some_and(|v| !v.is_empty()),
            apply_template: ok_json(&apply).is_some_and(|v| v["prompt"].is_string()),
            tgi_chat_tokenize: ok_json(&tgi).is_some_and(|v| v["tokenize_response"].is_array()),
            extras_tokenize: ok_json(&extras).as_ref().and_then(ids_at_tokens).is_some(),
            llamacpp_tokenize: false,
        };
        if !out.vllm_tokenize {
            let r = self
                .post_json("/tokenize", &json!({"content": "hi", "add_special": false}))
                .await;
            out.llamacpp_tokenize = ok_json(&r)
                .as_ref()
                .and_then(ids_at_tokens)
                .is_some_and(|v| !v.is_empty());
        }
        out
    }

    /// The server's own ids for a rendered chat (its template and tokenizer), or `None` when
    /// the server offers no way to ask.
    pub async fn tokenize_chat(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<Option<Vec<u32>>, CallError> {
        let caps = self.introspect().await;
        let model = &self.inner.opts.model;
        // The same template variables the chat requests carry, so the server renders the same.
        let kwargs = self.template_kwargs();
        if caps.vllm_tokenize {
            let mut body = json!({"model": model, "messages": messages,
                "add_generation_prompt": add_generation_prompt, "add_special_tokens": false});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            if let Some(kw) = &kwargs {
                body["chat_template_kwargs"] = json!(kw);
            }
            let v = self.post_ok("/tokenize", &body).await?;
            return self
                .ids_or_protocol("/tokenize", ids_at_tokens(&v))
                .map(Some);
        }
        if caps.tgi_chat_tokenize && add_generation_prompt {
            let mut body = json!({"model": model, "messages": messages});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            let v = self.post_ok("/chat_tokenize", &body).await?;
            let ids = v["tokenize_response"].as_array().and_then(|a| {
                a.iter()
                    .map(|t| as_u32(&t["id"]))
                    .collect::<Option<Vec<_>>>()
            });
            return self.ids_or_protocol("/chat_tokenize", ids).map(Some);
        }
        if caps.apply_template && caps.llamacpp_tokenize {
            let mut body =
                json!({"messages": messages, "add_generation_prompt": add_generation_prompt});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            if let Some(kw) = &kwargs {
                body["chat_template_kwargs"] = json!(kw);
            }
            let v = self.post_ok("/apply-template", &body).await?;
            let Some(prompt) = v["prompt"].as_str() else {
                return Err(self.protocol("/apply-template", "no string `prompt` in the reply"));
            };
            // As llama-server's chat path does: the prompt comes back with a template BOS text
            // already cut, and is tokenized with the vocabulary's own BOS added
            // (`tokenize_input_prompts(vocab, prompt, add_special = true, parse_special = true)`).
            let body = json!({"content": prompt, "add_special": true, "parse_special": true});
            let v = self.post_ok("/tokenize", &body).await?;
            return self
                .ids_or_protocol("/tokenize", ids_at_tokens(&v))
                .map(Some);
        }
        Ok(None)
    }

    /// The server's ids for plain text, or `None` when it cannot tokenize. llama-cpp-python's
    /// `/extras/tokenize` has no switch for special tokens, so it is used only with
    /// `add_special` (its default).
    pub async fn tokenize_text(
        &self,
        text: &str,
        add_special: bool,
    ) -> Result<Option<Vec<u32>>, CallError> {
        let caps = self.introspect().await;
        let (path, body) = if caps.vllm_tokenize {
            let b = json!({"model": self.inner.opts.model, "prompt": text,
                "add_special_tokens": add_special});
            ("/tokenize", b)
        } else if caps.llamacpp_tokenize {
            (
                "/tokenize",
                json!({"content": text, "add_special": add_special}),
            )
        } else if caps.extras_tokenize && add_special {
            ("/extras/tokenize", json!({"input": text}))
        } else {
            return Ok(None);
        };
        let v = self.post_ok(path, &body).await?;
        self.ids_or_protocol(path, ids_at_tokens(&v)).map(Some)
    }

    /// POST JSON expecting a 2xx JSON reply.
    pub(super) async fn post_ok(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        let r = self.post_json(path, body).await?;
        if !(200..300).contains(&r.status) {
            return Err(CallError::Status {
                url: self.shown(path),
                status: r.status,
                body: truncate(&String::from_utf8_lossy(&r.body), KEEP_CHARS),
            });
        }
        match r.json {
            Some(v) => Ok(v),
            None => Err(self.protocol(path, "the body is not JSON")),
        }
    }

    pub(super) fn protocol(&self, path: &str, detail: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: detail.to_string(),
        }
    }

    pub(super) fn ids_or_protocol(
        &self,
        path: &str,
        ids: Option<Vec<u32>>,
    ) -> Result<Vec<u32>, CallError> {
        ids.ok_or_else(|| self.protocol(path, "no list of token ids in the reply"))
    }
}

pub(super) fn ok_json(r: &Result<RawResponse, CallError>) -> Option<Value> {
    match r {
        Ok(r) if (200..300).contains(&r.status) => r.json.clone(),
        _ => None,
    }
}

pub(super) fn ok_status(r: &Result<RawResponse, CallError>) -> bool {
    matches!(r, Ok(r) if (200..300).contains(&r.status))
}

pub(super) fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

pub(super) fn id_list(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?.iter().map(as_u32).collect()
}

/// `{"tokens": [1, 2]}`, or llama.cpp's `with_pieces` `{"tokens": [{"id": 1, …}]}`.
pub(super) fn ids_at_tokens(v: &Value) -> Option<Vec<u32>> {
    let arr = v["tokens"].as_array()?;
    arr.iter()
        .map(|t| as_u32(t).or_else(|| as_u32(&t["id"])))
        .collect()
}
