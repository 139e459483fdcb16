//! `chatgate proxy`: record what a real client sends, or serve it hostile-but-legal SSE.
use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};
use crate::proxy::{self, HostileSse, ProxyOptions, ProxyState, Variant, VARIANTS};

/// The usage examples, in both the short and the long help.
macro_rules! examples {
    () => {
        "Examples:\n  \
chatgate serve --model models/tiny-chat --port 8000 &\n  \
chatgate proxy --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8001 --record client.jsonl\n  \
# point the app at http://127.0.0.1:8001, use it, then in the suite:\n  \
#   [client]\n  #   recording = \"client.jsonl\"\n  #   params = { temperature = 0.2 }\n  \
chatgate proxy --upstream http://127.0.0.1:8000 --hostile-sse\n  \
chatgate proxy --upstream http://127.0.0.1:8000 --hostile-sse ids,keep-alive"
    };
}

#[derive(Args)]
#[command(
    after_help = examples!(),
    after_long_help = concat!(
        "Sit between a real client and the server (the client boundary). Every request is \
forwarded to --upstream verbatim (method, path, query, headers except hop-by-hop ones, body) and the \
response streams back as it arrives, SSE included.\n\n\
--record FILE appends one JSON line per exchange: ts, method, path, query, request_headers \
(values only for an allow-list such as content-type, accept, user-agent; every other header, \
authorization and cookies included, is written as \"<redacted>\"), request_body, status, \
content_type, response_body (for SSE: the list of data payloads), stream, timings {headers_ms, \
end_ms}, error. Query parameters and JSON fields named like credentials are redacted, and so is \
the password of an --upstream URL. An exchange the upstream never answered is recorded too. Point the suite's [client] recording at it and `chatgate check` diffs \
what the client really sent against the [client] contract (endpoint, model, params, required, \
forbidden, stream, message shapes, rejected requests).\n\n\
--hostile-sse re-frames streamed responses as hostile-but-legal SSE with byte-identical payloads and \
the same events, each variant legal under the WHATWG event-stream rules: a client that breaks through \
it has an SSE reader that is not spec-correct. `chatgate client-probe` runs a client command through \
each variant alone and names the ones that break it.\n\n\
Once ready it prints one line `listening on http://HOST:PORT` to stdout. An unreachable upstream is \
answered with 502 and an OpenAI-shaped error naming it. SIGINT/SIGTERM stop it gracefully.",
        "\n\n",
        examples!()
    )
)]
pub struct ProxyArgs {
    /// The server to forward to (base URL; the client's paths are appended verbatim).
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// Where to listen (port 0 picks a free one; read it from the `listening on` line).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8001")]
    pub listen: String,
    /// Append every exchange (client request, server response) to this JSONL file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Re-frame streamed (SSE) responses as hostile-but-legal SSE with byte-identical data
    /// payloads: `all` (the default) or a comma-separated list of variants (below). Each one
    /// alone is what `chatgate client-probe` runs to name what breaks a client.
    #[arg(long, value_name = "VARIANTS", num_args = 0..=1, default_missing_value = "all",
          value_parser = VariantsParser)]
    pub hostile_sse: Option<VariantList>,
    /// With --hostile-sse: reads of at most this many bytes, in place of `bytes-1` and
    /// `odd-reads` (`utf8-split` and `crlf-split` still cut inside characters and CRLF pairs).
    #[arg(long, value_name = "N", requires = "hostile_sse",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_bytes: Option<u32>,
}

/// The hostile SSE variants a flag named (a newtype, so clap takes the list as one value).
#[derive(Clone, Debug)]
pub struct VariantList(pub Vec<Variant>);

/// `all` or a comma-separated list of variant names; `--help` lists each with what it does.
#[derive(Clone)]
pub struct VariantsParser;

impl clap::builder::TypedValueParser for VariantsParser {
    type Value = VariantList;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<VariantList, clap::Error> {
        use clap::error::ErrorKind;
        let s = value
            .to_str()
            .ok_or_else(|| clap::Error::new(ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        Variant::parse_list(s)
            .map(VariantList)
            .map_err(|e| clap::Error::raw(ErrorKind::InvalidValue, format!("{e}\n")).with_cmd(cmd))
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        use clap::builder::PossibleValue;
        let all = PossibleValue::new("all").help("every variant at once");
        Some(Box::new(
            std::iter::once(all).chain(
                VARIANTS
                    .iter()
                    .map(|v| PossibleValue::new(v.name).help(v.does)),
            ),
        ))
    }
}

pub fn run(a: ProxyArgs) -> Result<i32> {
    // Credentials in the upstream URL are redacted from every output and the recording.
    crate::secrets::register_url_credentials(&a.upstream);
    let opts = ProxyOptions {
        upstream: a.upstream,
        record: a.record,
        hostile: a.hostile_sse.map(|VariantList(vs)| HostileSse {
            chunk_bytes: a.chunk_bytes.map(|n| n as usize),
            ..HostileSse::only(&vs)
        }),
    };
    let state = ProxyState::new(&opts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::input(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async move {
        let (listener, local) = proxy::bind(&a.listen).await?;
        eprintln!(
            "chatgate proxy: forwarding to {}{}{}",
            crate::secrets::redact(&opts.upstream),
            match &opts.record {
                Some(p) => format!(", recording to {}", p.display()),
                None => String::new(),
            },
            match &opts.hostile {
                Some(h) => format!(", hostile SSE: {}", h.describe()),
                None => String::new(),
            }
        );
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local}");
        let _ = out.flush();
        drop(out);
        proxy::serve(listener, state, super::shutdown_signal("proxy"))
            .await
            .map_err(|e| Error::input(format!("the proxy failed: {e}")))?;
        Ok(0)
    })
}
