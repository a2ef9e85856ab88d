//! A cheaper draft keeps speculative decoding lossless: a vocabulary subset never
//! drafts a token outside it, its scores are the full head's bit for bit, greedy output is the
//! target's, sampled output is distributed as the target's even when the target's likeliest
//! tokens are outside the subset (and a q that forgets the subset is caught); a requantized
//! draft reads fewer bytes and stays lossless; a frequency table made with another tokenizer
//! is refused by name.

mod common;
use common::lossless::*;
use common::*;
use specx_decoder::cheap_draft::frequencies::TokenFrequencies;
use specx_decoder::gguf::GgmlType;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::StDtype;
use specx_decoder::{DraftTransform, DraftWeights, Transformer, WeightMode, default_device, load_model_as};

/// A drafter that checks every candidate against the subset and that q has no mass outside it.
struct SubsetChecked<'m> {
    inner: PlainDrafter<'m>,
    subset: Vec<u32>,
    drafted: usize,
}

impl Drafter for SubsetChecked<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let out = self.inner.draft(round)?;
        for c in &out {
            assert!(self.subset.contains(&c.token), "drafted token {} outside the subset {:?}", c.token, self.subset);
            let outside: f32 =
                c.q.iter().enumerate().filter(|(t, _)| !self.subset.contains(&(*t as u32))).map(|(_, p)| p).sum();
            assert_eq!(outside, 0.0, "q puts mass outside the subset");
        }
        self.drafted += out.len();
        Ok(out)
    }
    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

/// The bug a subset invites: tokens drawn from the subset's q, but the q reported to the
/// verifier is the full draft's (not renormalised over the subset).
struct SubsetTokensFullQ<'m> {
    sub: &'m Transformer,
    full: &'m Transformer,
}

impl Drafter for SubsetTokensFullQ<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let DraftRound { committed, max, sampling: s, streams, metrics, .. } = round;
        let mut seq = committed.to_vec();
        let mut out = Vec::new();
        for _ in 0..max.min(2) {
            let logits =
                |m: &Transformer| specx_decoder::generate::last_logits(&m.forward(&seq, &mut m.new_cache(1)).unwrap());
            let q_sub = s.probabilities(&logits(self.sub));
            let q_full = s.probabilities(&logits(self.full));
            let token = specx_decoder::sampling::sample_from(&q_sub, &mut streams.draft(seq.len()));
            metrics.n_draft_calls += 1;
            seq.push(token);
            out.push(Candidate { token, q_token: q_full[token as usize], q: q_full, ngram: None });
        }
        Ok(out)
    }
    fn rollback(&mut self, _: usize) {}
}

/// The target's `n` likeliest first tokens after `prompt`.
fn likeliest(t: &Transformer, prompt: &[u32], n: usize) -> Vec<u32> {
    let logits = specx_decoder::generate::last_logits(&t.forward(prompt, &mut t.new_cache(1)).unwrap());
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    ids.truncate(n);
    ids
}

#[test]
fn a_subset_head_scores_its_tokens_bit_for_bit_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::synthetic::tiny_qwen2(VOCAB);
    let (hf, gguf) = write_both(dir.path(), &cfg, 5, StDtype::F32, GgmlType::Q8_0);
    let ids = vec![0u32, 3, 7, 11, (VOCAB - 1) as u32];
    let tokens = [1u32, 2, 3, 4, 5];
    for (path, mode) in [(&hf, WeightMode::F32), (&gguf, WeightMode::Native), (&gguf, WeightMode::Q8)] {
        let m = load_model_as(path, None, &default_device(), mode).unwrap();
        let full = rows(&m.model.forward(&tokens, &mut m.model.new_cache(1)).unwrap());
        let sub_model = m.model.clone().restrict_vocab(&ids).unwrap();
        let sub = rows(&sub_model.forward(&tokens, &mut sub_model.new_cache(1)).unwrap());
        for (f, s) in full.iter().zip(&sub) {
            for (t, (a, b)) in f.iter().zip(s).enumerate() {
                if ids.contains(&(t as u32)) {
                    assert_eq!(a.to_bits(), b.to_bits(), "{mode}: token {t}");
                } else {
                    assert_eq!(*b, f32::NEG_INFINITY, "{mode}: token {t} outside the subset");
                }
            }
        }
    }
    let m = load_model_as(&hf, None, &default_device(), WeightMode::F32).unwrap();
    let e = |ids: &[u32]| format!("{:#}", m.model.clone().restrict_vocab(ids).err().expect("refused"));
    assert!(e(&[]).contains("need 1..="), "{}", e(&[]));
    assert!(e(&[1, 1]).contains("twice"));
    assert!(e(&[VOCAB as u32]).contains("outside the vocabulary"));
}

#[test]
fn a_subset_draft_never_drafts_outside_it_and_stays_lossless() {
    const N: usize = 6000;
    const ALPHA: f64 = 1e-3;
    let (_d, t, d) = pair(SMALL_VOCAB, 11, 12);
    let prompt = vec![1u32, 4, 2];
    // The subset leaves out the target's likeliest first token (it can only come from the
    // verifier's residual distribution) and the draft's two likeliest (so the full draft's q
    // differs much from the subset's).
    let mut excluded = likeliest(&t.model, &prompt, 1);
    for x in likeliest(&d.model, &prompt, 2) {
        if !excluded.contains(&x) {
            excluded.push(x);
        }
    }
    let subset: Vec<u32> = (0..SMALL_VOCAB as u32).filter(|x| !excluded.contains(x)).collect();
    let sub = d.model.clone().restrict_vocab(&subset).unwrap();
    let short = Short::at_t1(&t.model);
    let (exact, cfg) = (&short.exact, |seed| short.cfg(seed));
    let mut drafted = 0;
    let counts = sample_counts(N, |seed| {
        let mut dr = SubsetChecked { inner: PlainDrafter::new(&sub), subset: subset.clone(), drafted: 0 };
        let g =
            generate_speculative(&t.model, &mut dr, &mut FixedK(2), &mut RejectionSampler, &prompt, &cfg(seed), &[])
                .unwrap();
        drafted += dr.drafted;
        g.tokens
    });
    assert!(drafted > N, "the drafter proposed only {drafted} candidates");
    let outside: usize = counts.iter().filter(|(k, _)| excluded.contains(&k[0])).map(|(_, c)| c).sum();
    assert!(outside > N / 10, "the excluded tokens {excluded:?} came first only {outside} times of {N}");
    let p_ok = chi_square_p(&counts, exact, N);
    assert!(p_ok > ALPHA, "speculative sampling with a subset draft rejected: p = {p_ok:.2e}");
    let bad = sample_counts(N, |seed| {
        let mut dr = SubsetTokensFullQ { sub: &sub, full: &d.model };
        generate_speculative(&t.model, &mut dr, &mut FixedK(2), &mut RejectionSampler, &prompt, &cfg(seed), &[])
            .unwrap()
            .tokens
    });
    let p_bad = chi_square_p(&bad, exact, N);
    assert!(p_bad < ALPHA, "a q that ignores the subset went unnoticed: p = {p_bad:.2e}");
    eprintln!(
        "chi-square p-values: subset draft {p_ok:.3}, full q reported {p_bad:.2e}; first token outside the subset {outside} of {N}"
    );

    // Greedy: the target's own output, for prompts whose next token the subset lacks.
    let greedy = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
    for p in [vec![1u32, 4, 2], vec![0, 3], vec![5, 5, 1, 2]] {
        let ar = generate_autoregressive(&t.model, &p, &greedy, &[]).unwrap().tokens;
        let mut dr = SubsetChecked { inner: PlainDrafter::new(&sub), subset: subset.clone(), drafted: 0 };
        let g =
            generate_speculative(&t.model, &mut dr, &mut FixedK(3), &mut RejectionSampler, &p, &greedy, &[]).unwrap();
        assert_eq!(g.tokens, ar, "prompt {p:?}");
    }
}

#[test]
fn a_requantized_draft_reads_fewer_bytes_and_stays_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::synthetic::tiny_qwen2(VOCAB);
    let (_, target) = write_both(&dir.path().join("t"), &cfg, 21, StDtype::F32, GgmlType::Q8_0);
    let (hf, draft) = write_both(&dir.path().join("d"), &cfg, 22, StDtype::F32, GgmlType::Q8_0);
    let t = load_model_as(&target, None, &default_device(), WeightMode::Q8).unwrap();
    let d = load_model_as(&draft, None, &default_device(), WeightMode::Q8).unwrap();
    let q4 = DraftTransform { weights: Some(DraftWeights::Q4_0), ..Default::default() };
    let cheap = q4.apply(d.model.clone(), &d.tokenizer).unwrap();
    assert!(
        cheap.weight_bytes_per_token() < d.model.weight_bytes_per_token() * 7 / 10,
        "{} vs {}",
        cheap.weight_bytes_per_token(),
        d.model.weight_bytes_per_token()
    );
    assert!(cheap.runs_integer());
    let greedy = SpecConfig { max_new_tokens: 16, sampling: SamplingConfig::greedy(), seed: 0 };
    for p in [vec![1u32, 4, 2], vec![7, 3, 9]] {
        let ar = generate_autoregressive(&t.model, &p, &greedy, &[]).unwrap().tokens;
        let mut dr = PlainDrafter::new(&cheap);
        assert_eq!(
            generate_speculative(&t.model, &mut dr, &mut FixedK(3), &mut RejectionSampler, &p, &greedy, &[])
                .unwrap()
                .tokens,
            ar
        );
    }
    // f32 weights hold no blocks to requantize.
    let f = load_model_as(&hf, None, &default_device(), WeightMode::F32).unwrap();
    let e = format!("{:#}", q4.apply(f.model.clone(), &f.tokenizer).err().expect("refused"));
    assert!(e.contains("--weights native or q8"), "{e}");
}

#[test]
fn a_frequency_table_of_another_tokenizer_or_a_bad_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, _t, d) = pair(VOCAB, 1, 2);
    let counts: Vec<u64> = (0..VOCAB as u64).map(|i| (i * 7) % 5).collect();
    let table = |sha: String| TokenFrequencies::from_counts(&counts, vec![(VOCAB - 1) as u32], sha, VOCAB, Vec::new());
    let ours = dir.path().join("ours.tsv");
    table(d.tokenizer.vocab_sha256()).write(&ours).unwrap();
    let theirs = dir.path().join("theirs.tsv");
    table("f".repeat(64)).write(&theirs).unwrap();
    let with = |path: &std::path::Path, n: usize| DraftTransform {
        vocab: Some(n),
        vocab_table: Some(path.to_path_buf()),
        weights: None,
    };
    let m = with(&ours, 4).apply(d.model.clone(), &d.tokenizer).unwrap();
    assert_eq!(m.vocab_subset().unwrap().len(), 4);
    assert!(m.vocab_subset().unwrap().contains(&((VOCAB - 1) as u32)), "the special token is always in");
    let e = format!("{:#}", with(&theirs, 4).apply(d.model.clone(), &d.tokenizer).err().expect("refused"));
    assert!(e.contains("another tokenizer") && e.contains("ffffffffffff") && e.contains("tokenizer.json"), "{e}");
    // Sizes are refused before any model is involved.
    assert!(format!("{:#}", with(&ours, 0).check().unwrap_err()).contains("need 1..="));
    assert!(format!("{:#}", with(&ours, VOCAB + 1).check().unwrap_err()).contains("need 1..="));
    assert!(format!("{:#}", "q3_k".parse::<DraftWeights>().unwrap_err()).contains("unknown draft weight type 'q3_k'"));
    // The identity names the table by content: the same table elsewhere is the same draft.
    let copy = dir.path().join("copy.tsv");
    std::fs::copy(&ours, &copy).unwrap();
    assert_eq!(with(&ours, 4).identity().unwrap(), with(&copy, 4).identity().unwrap());
    assert_ne!(with(&ours, 4).identity().unwrap(), with(&ours, 5).identity().unwrap());
}
