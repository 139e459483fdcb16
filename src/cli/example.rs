//! `chatgate example DIR`: the embedded example project, and what to run next.
use super::ExampleArgs;
use crate::error::Result;

pub fn run(a: ExampleArgs) -> Result<i32> {
    let written = crate::example::write(&a.dir)?;
    let dir = a.dir.display();
    println!(
        "wrote {} files under {dir}: a suite, the tiny chat model it gates, its lock and reviewed snapshots\n",
        written.len()
    );
    println!("Next:");
    println!("  chatgate gate {dir}/suites/smoke.toml                     the whole gate, the model in-process");
    println!("  chatgate serve --model {dir}/models/tiny-chat --port 8000 &");
    println!("  chatgate gate {dir}/suites/smoke.toml --target http://127.0.0.1:8000   the same gate against a server");
    Ok(0)
}
