//! Puts the built web page into the gateway binary: copies `web/dist` (or the directory in
//! `PTYHUB_WEB_DIST`) into `$OUT_DIR/page`, which `src/web.rs` embeds with rust-embed.
//!
//! The page is built by npm (`cargo xtask web`, `cargo xtask up`, or `npm run build` in `web/`),
//! never here: a build script that ran npm would need the network and Node on every machine
//! that compiles Rust. Without a built page the binary carries none, says so with a warning
//! here and with a 404 that explains it at `/`, and `--web-dir` still serves one from disk.

use std::path::{Path, PathBuf};
use std::{env, fs, io};

fn main() -> io::Result<()> {
    println!("cargo:rerun-if-env-changed=PTYHUB_WEB_DIST");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let web = manifest.join("../..").join("web");
    let dist = env::var_os("PTYHUB_WEB_DIST").map_or_else(|| web.join("dist"), PathBuf::from);
    let page = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it")).join("page");
    if page.exists() {
        fs::remove_dir_all(&page)?;
    }
    fs::create_dir_all(&page)?;
    if dist.join("index.html").is_file() {
        // A change anywhere in the built page builds the binary again.
        println!("cargo:rerun-if-changed={}", dist.display());
        copy_tree(&dist, &page)?;
    } else {
        // Watch `web/` until the page appears there; once it is built, only `web/dist`.
        println!("cargo:rerun-if-changed={}", web.display());
        println!(
            "cargo:warning=no built web page in {}: this gateway binary carries none (build it with `cargo xtask web`, or serve one with --web-dir)",
            dist.display()
        );
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
