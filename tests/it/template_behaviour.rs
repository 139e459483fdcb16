//! Behaviour of the template boundary beyond byte parity: limits, error kinds, generation
//! spans, capabilities and the request checks transformers performs.
use std::time::{Duration, Instant};

use chatgate::template::{ChatTemplate, RenderLimits, RenderRequest, SpecialTokens, TemplateError};
use serde_json::{json, Value};

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn req(messages: Vec<Value>) -> RenderRequest {
    RenderRequest {
        messages,
        special_tokens: SpecialTokens {
            bos_token: Some("<s>".into()),
            eos_token: Some("</s>".into()),
            ..SpecialTokens::default()
        },
        ..RenderRequest::default()
    }
}

fn render(src: &str, messages: Vec<Value>) -> Result<String, TemplateError> {
    ChatTemplate::new(src)?
        .render(&req(messages))
        .map(|r| r.text)
}

const CHATML: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

#[test]
fn hostile_templates_stop_with_a_limit_quickly() {
    let hostile = [
        "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}{% endfor %}{% endfor %}{% endfor %}",
        "{% for i in range(10) %}{% for j in range(10000) %}{% for k in range(10000) %}x{% endfor %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}",
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        "{% set ns = namespace(s='xxxxxxxxxx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "{% set ns = namespace(s=[1]) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
        "{% for i in range(100000) %}{% set x %}{{ 'y' * 100000 }}{% endset %}{% endfor %}",
        "{{ 'x'.center(999999999) }}",
    ];
    for src in hostile {
        let start = Instant::now();
        let got = render(src, vec![user("hi")]);
        let took = start.elapsed();
        assert!(
            matches!(got, Err(TemplateError::Limit(_))),
            "{src}: expected a limit, got {got:?}"
        );
        assert!(took < Duration::from_secs(1), "{src}: took {took:?}");
    }
}

#[test]
fn custom_limits_apply() {
    let limits = RenderLimits {
        fuel: 2_000,
        max_recursion: 50,
        max_output_bytes: 64,
    };
    let loop_tpl = ChatTemplate::with_limits("{% for i in range(5000) %}{% endfor %}", limits)
        .expect("compiles");
    assert!(matches!(
        loop_tpl.render(&req(vec![user("hi")])),
        Err(TemplateError::Limit(_))
    ));
    let out_tpl = ChatTemplate::with_limits("{{ 'x' * 100 }}", limits).expect("compiles");
    assert!(matches!(
        out_tpl.render(&req(vec![user("hi")])),
        Err(TemplateError::Limit(_))
    ));
    let ok = ChatTemplate::with_limits(CHATML, limits).expect("compiles");
    assert!(ok.render(&req(vec![user("hi")])).is_ok());
}

#[test]
fn errors_have_the_right_kind_and_message() {
    let raised = render(
        "{{ raise_exception('Roles must alternate — é') }}",
        vec![user("hi")],
    );
    assert_eq!(
        raised,
        Err(TemplateError::Raised("Roles must alternate — é".into()))
    );

    match ChatTemplate::new("line one\n{% if true %}\n{{ x + }}\n") {
        Err(TemplateError::Syntax(msg)) => assert!(msg.contains(":3"), "no line number in {msg:?}"),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    match ChatTemplate::new("{{ 'a b'|split }}") {
        Err(TemplateError::Syntax(msg)) => assert!(msg.contains("split"), "{msg}"),
        other => panic!("jinja2 has no split filter; got {other:?}"),
    }
    assert!(matches!(
        render("{{ messages[0].nope.deeper }}", vec![user("hi")]),
        Err(TemplateError::Render(_))
    ));
    assert!(matches!(
        render("{% set l = [] %}{{ l.append(1) }}", vec![user("hi")]),
        Err(TemplateError::Render(_))
    ));
    assert!(matches!(
        render("{% for t in tools %}{% endfor %}", vec![user("hi")]),
        Err(TemplateError::Render(_))
    ));

    let t = ChatTemplate::new(CHATML).expect("compiles");
    let mut both = req(vec![
        user("hi"),
        json!({"role": "assistant", "content": "yo"}),
    ]);
    both.add_generation_prompt = true;
    both.continue_final_message = true;
    match t.render(&both) {
        Err(TemplateError::Input(msg)) => {
            assert!(msg
                .starts_with("continue_final_message and add_generation_prompt are not compatible"))
        }
        other => panic!("expected an input error, got {other:?}"),
    }
    assert!(matches!(
        t.render(&req(vec![])),
        Err(TemplateError::Input(_))
    ));
}

#[test]
fn continue_final_message_cuts_at_the_tag() {
    let t = ChatTemplate::new(CHATML).expect("compiles");
    let mut r = req(vec![
        user("hi"),
        json!({"role": "assistant", "content": "Hello, wor"}),
    ]);
    r.continue_final_message = true;
    assert_eq!(
        t.render(&r).expect("renders").text,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello, wor"
    );
}

#[test]
fn generation_spans_are_code_point_offsets() {
    let src = "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}";
    let t = ChatTemplate::new(src).expect("compiles");
    assert!(t.has_generation_tags());
    let out = t
        .render(&req(vec![
            user("héllo 🤖"),
            json!({"role": "assistant", "content": "ok"}),
        ]))
        .expect("renders");
    // trim_blocks eats the newline after `{% endif %}`; offsets verified with transformers.
    assert_eq!(out.text, "user: héllo 🤖assistant: ok</s>");
    assert_eq!(out.assistant_spans, vec![(24, 30)]);
    let chars: Vec<char> = out.text.chars().collect();
    assert_eq!(chars[24..30].iter().collect::<String>(), "ok</s>");
    assert!(!ChatTemplate::new(CHATML)
        .expect("compiles")
        .has_generation_tags());
}

#[test]
fn inputs_are_preprocessed_like_transformers_5() {
    let src = "{% for m in messages %}{{ m }}\n{% endfor %}{{ bos_token }}|{{ unk_token is defined }}|{{ tools is none }}|{{ documents is none }}|{{ flag }}";
    let t = ChatTemplate::new(src).expect("compiles");
    let mut r = req(vec![
        json!({"role": "assistant", "content": null, "reasoning": "r", "tool_calls": null}),
    ]);
    r.extra.insert("bos_token".into(), json!("OVERRIDE"));
    r.extra.insert("flag".into(), json!(1.0));
    assert_eq!(
        t.render(&r).expect("renders").text,
        "{'thinking': 'r', 'role': 'assistant', 'reasoning': 'r', 'reasoning_content': 'r'}\nOVERRIDE|False|True|True|1.0"
    );
}

#[test]
fn strftime_now_uses_the_local_clock() {
    let before = chrono::Local::now().format("%d %b %Y").to_string();
    let got = render("{{ strftime_now('%d %b %Y') }}", vec![user("hi")]).expect("renders");
    let after = chrono::Local::now().format("%d %b %Y").to_string();
    assert!(got == before || got == after, "{got} vs {before}/{after}");
}

#[test]
fn capabilities_are_probed() {
    let special = SpecialTokens::default();
    let chatml = ChatTemplate::new(CHATML)
        .expect("compiles")
        .capabilities(&special);
    assert!(chatml.system_role);
    assert!(!chatml.tools);
    assert!(!chatml.generation_tags);
    assert_eq!(
        chatml.generation_prompt.as_deref(),
        Some("<|im_start|>assistant\n")
    );

    let no_system = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
{% for t in tools or [] %}{{ t }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}";
    let caps = ChatTemplate::new(no_system)
        .expect("compiles")
        .capabilities(&special);
    assert!(!caps.system_role);
    assert!(caps.tools);
    assert_eq!(caps.generation_prompt.as_deref(), Some(""));
}

/// jinja2's map/select/reject/selectattr/rejectattr return generators. Expected values are
/// transformers 5.23's own renders (`_compile_jinja_template(src).render(tools=...)`).
#[test]
fn filter_results_are_generators_as_in_jinja2() {
    let tools = json!([
        {"type": "function", "function": {"name": "a"}},
        {"type": "function", "function": {"name": "b"}}
    ]);
    let run = |src: &str| -> Result<String, TemplateError> {
        ChatTemplate::new(src)?
            .render(&RenderRequest {
                tools: Some(tools.clone()),
                ..req(vec![user("hi")])
            })
            .map(|r| r.text)
    };
    // llama.cpp's DeepSeek-R1 template: raises in transformers, must raise here.
    let e = run("{{ tools | map(attribute='function') | tojson(indent=2) }}").unwrap_err();
    assert!(
        e.to_string()
            .contains("Object of type generator is not JSON serializable"),
        "{e}"
    );
    let e = run("{{ tools | selectattr('type') | length }}").unwrap_err();
    assert!(
        e.to_string()
            .contains("object of type 'generator' has no len()"),
        "{e}"
    );
    let ok = [
        (
            "{{ tools | map(attribute='function') | list | tojson }}",
            r#"[{"name": "a"}, {"name": "b"}]"#,
        ),
        (
            "{{ tools | map(attribute='function') | map(attribute='name') | join(',') }}",
            "a,b",
        ),
        (
            "{% if tools | selectattr('type', 'equalto', 'nope') %}yes{% else %}no{% endif %}",
            "yes",
        ),
        ("{{ (tools | selectattr('type') | first).function.name }}", "a"),
        (
            "{% for t in tools | rejectattr('type', 'equalto', 'x') %}{{ loop.index }}{{ t.function.name }}{% endfor %}",
            "1a2b",
        ),
        ("{{ 'function' in (tools | map(attribute='type')) }}", "True"),
        (
            "{% for t in tools | select %}{{ loop.length }}{% endfor %}",
            "22",
        ),
    ];
    for (src, want) in ok {
        assert_eq!(run(src).unwrap(), want, "{src}");
    }
}

/// `pprint` of a 1,500-deep nest hung (minijinja's pretty printer is cubic in depth): it is a
/// recursion error now, as in Python, and returns at once.
#[test]
fn deep_pprint_is_a_recursion_error_not_a_hang() {
    let src = "{% set ns = namespace(x=[]) %}{% for i in range(1500) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | pprint }}";
    let t0 = Instant::now();
    let e = render(src, vec![user("hi")]).unwrap_err();
    assert!(e.to_string().contains("maximum recursion depth"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let shallow = render("{{ [[1, 2], {'a': 3}] | pprint }}", vec![user("hi")]).unwrap();
    assert!(shallow.contains('2') && shallow.contains('3'), "{shallow}");
}

/// String literals decode as Python's `unicode-escape` does in jinja2's lexer: a backslash-newline
/// is a line continuation (both characters dropped; CRLF first becomes LF), and `\N{NAME}` is the
/// named character, case-insensitive. Expected values rendered by jinja2 3.1.6 (the
/// transformers 5.23 venv of scripts/servers/install-transformers-serve.sh):
/// `jinja2.Environment().from_string(src).render()`.
#[test]
fn string_literals_decode_line_continuations_and_named_characters_as_python_does() {
    for (src, want) in [
        ("{{ 'one \\\ntwo' }}", "one two"),
        ("{{ 'a\\\r\nb' }}", "ab"),
        ("{{ \"x \\\ny\" }}", "x y"),
        (
            "{{ '\\N{EM DASH}x\\N{LATIN SMALL LETTER E WITH ACUTE}' }}",
            "—xé",
        ),
        ("{{ '\\N{em dash}' }}", "—"),
        // Mistral Small 3.1's default system prompt is written this way.
        (
            "{%- set default = \"You are Mistral Small 3.1, a Large Language Model (LLM) \\\ncreated by Mistral AI.\" %}{{ default }}",
            "You are Mistral Small 3.1, a Large Language Model (LLM) created by Mistral AI.",
        ),
    ] {
        assert_eq!(render(src, vec![user("hi")]).unwrap(), want, "{src:?}");
    }
}
