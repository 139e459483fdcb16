use sha2::Digest;
#[test]
fn bench() {
    let p = std::path::Path::new("/tmp/cg_big.bin");
    let t = std::time::Instant::now();
    let data = std::fs::read(p).unwrap();
    println!("read {:?}", t.elapsed());
    let t = std::time::Instant::now();
    println!("{} one-shot {:?}", hex::encode(sha2::Sha256::digest(&data)), t.elapsed());
    let mut h = sha2::Sha256::new();
    for c in data.chunks(2 << 20) { h.update(c); }
    println!("{} chunked", hex::encode(h.finalize()));
    println!("{} ours", chatgate::artifacts::sha256_file(p).unwrap());
}
