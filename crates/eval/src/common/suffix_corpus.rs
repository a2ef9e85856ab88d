//! The suffix drafter's corpus kept between runs (`--suffix-corpus FILE`): earlier outputs as
//! JSON lines, oldest first, after a header line naming the vocabulary their token ids belong
//! to. A run reads every output, then appends its own with one write of whole lines, so a
//! crash leaves at most a last line without its newline, which the next read skips (and says
//! so) and the next append cuts off before it writes.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

const FORMAT: &str = "specx-suffix-corpus";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    /// sha256 over the tokenizer's vocabulary (`Tokenizer::vocab_sha256`).
    vocab_sha256: String,
}

#[derive(Serialize, Deserialize)]
struct Output<'a> {
    tokens: Cow<'a, [u32]>,
}

/// A corpus file's outputs, oldest first, and the vocabulary they were written with.
#[derive(Debug, Default, PartialEq)]
pub struct CorpusFile {
    /// None for a file that does not exist yet.
    pub vocab_sha256: Option<String>,
    pub outputs: Vec<Vec<u32>>,
    /// Bytes of whole lines (a torn last line excluded).
    complete_len: u64,
    /// Whether the last line was torn (no newline).
    pub torn: bool,
}

impl CorpusFile {
    /// Reads `path` (an absent file is an empty corpus). Any line but a torn last one that does
    /// not parse is an error naming its line.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e).with_context(|| format!("reading the suffix corpus {}", path.display())),
        };
        let complete_len = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let torn = complete_len < bytes.len();
        let text = std::str::from_utf8(&bytes[..complete_len])
            .with_context(|| format!("the suffix corpus {} is not UTF-8 text", path.display()))?;
        let mut lines = text.lines();
        let Some(first) = lines.next() else {
            return Ok(Self { vocab_sha256: None, outputs: Vec::new(), complete_len: 0, torn });
        };
        let header: Header = serde_json::from_str(first).with_context(|| {
            format!("{} line 1: not a suffix corpus header (written by `specx decode --suffix-corpus`)", path.display())
        })?;
        ensure!(
            header.format == FORMAT && header.version == VERSION,
            "{} line 1: a {} file of version {}, not a {FORMAT} of version {VERSION}",
            path.display(),
            header.format,
            header.version
        );
        let mut outputs = Vec::new();
        for (i, line) in lines.enumerate() {
            let o: Output = serde_json::from_str(line)
                .with_context(|| format!("{} line {}: not an output ({{\"tokens\": [ids]}})", path.display(), i + 2))?;
            outputs.push(o.tokens.into_owned());
        }
        Ok(Self { vocab_sha256: Some(header.vocab_sha256), outputs, complete_len: complete_len as u64, torn })
    }

    /// Refuses a corpus written with another vocabulary.
    pub fn check_vocab(&self, path: &Path, vocab_sha256: &str) -> Result<()> {
        if let Some(have) = &self.vocab_sha256
            && have != vocab_sha256
        {
            bail!(
                "the suffix corpus {} holds token ids of another vocabulary (sha256 {}, the target's is {}): use a corpus of this tokenizer's outputs",
                path.display(),
                specx_decoder::fsutil::short_hash(have),
                specx_decoder::fsutil::short_hash(vocab_sha256)
            );
        }
        Ok(())
    }

    /// Appends `outputs` to `path` as read into `self`: the header first if the file is new,
    /// a torn last line cut off, then one write of whole lines, synced.
    pub fn append(&self, path: &Path, vocab_sha256: &str, outputs: &[Vec<u32>]) -> Result<()> {
        self.check_vocab(path, vocab_sha256)?;
        let mut lines = String::new();
        if self.vocab_sha256.is_none() {
            let header = Header { format: FORMAT.into(), version: VERSION, vocab_sha256: vocab_sha256.into() };
            lines += &serde_json::to_string(&header)?;
            lines.push('\n');
        }
        for o in outputs {
            lines += &serde_json::to_string(&Output { tokens: Cow::Borrowed(o) })?;
            lines.push('\n');
        }
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("opening the suffix corpus {}", path.display()))?;
        // Whatever follows the whole lines read (a torn line) goes; the new lines follow them.
        file.set_len(self.complete_len)?;
        file.seek(SeekFrom::Start(self.complete_len))?;
        file.write_all(lines.as_bytes())
            .with_context(|| format!("appending to the suffix corpus {}", path.display()))?;
        file.sync_all()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_append_and_a_torn_last_line_is_skipped_then_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corpus.jsonl");
        let empty = CorpusFile::read(&path).unwrap();
        assert!(empty.outputs.is_empty() && empty.vocab_sha256.is_none());
        empty.append(&path, "abc", &[vec![1, 2, 3]]).unwrap();
        let one = CorpusFile::read(&path).unwrap();
        assert_eq!(one.outputs, vec![vec![1, 2, 3]]);
        one.append(&path, "abc", &[vec![4], vec![5, 6]]).unwrap();
        // A crash in the middle of a line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"tokens\": [7, ").unwrap();
        let torn = CorpusFile::read(&path).unwrap();
        assert!(torn.torn);
        assert_eq!(torn.outputs, vec![vec![1, 2, 3], vec![4], vec![5, 6]]);
        torn.append(&path, "abc", &[vec![8]]).unwrap();
        let after = CorpusFile::read(&path).unwrap();
        assert!(!after.torn);
        assert_eq!(after.outputs.last(), Some(&vec![8]));
        assert_eq!(after.outputs.len(), 4);
        assert!(after.append(&path, "other", &[vec![9]]).is_err(), "another vocabulary is refused");
        std::fs::write(&path, "not json\n").unwrap();
        let err = CorpusFile::read(&path).unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    }
}
