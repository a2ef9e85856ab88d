//! File helpers shared by every writer in specx: atomic writes and checksums. A killed
//! atomic write leaves `.NAME.tmp-PID` behind; run directories delete those when they resume
//! (`specx_run::resume`).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader (or an interrupted run) never sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = path.file_name().context("path has no file name")?.to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    // A failed write (a full disk, a file size limit) leaves `path` as it was and no temporary.
    if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
        drop(f);
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {} ({} bytes)", path.display(), bytes.len()));
    }
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// The first 12 hex digits of a checksum, enough to tell two apart in a message.
pub fn short_hash(hex: &str) -> &str {
    &hex[..12.min(hex.len())]
}

/// Hex sha256 of bytes in memory.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}
