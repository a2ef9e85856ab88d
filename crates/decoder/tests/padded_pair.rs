//! A pair whose target pads its head past the shared vocabulary (as Qwen2.5-7B's 152,064
//! logits against the 0.5B's 151,936): the draft's rows are padded with probability 0, it never
//! proposes a padded id, and speculative decoding stays exact. The tiny target's padded rows
//! have random weights, so unlike a trained model's they carry real probability: a residual
//! that drops them is caught by the chi-square test.

mod common;
use common::lossless::*;
use common::*;
use rand::RngExt;
use rand::rngs::StdRng;
use specx_decoder::sampling::{SamplingConfig, sample_from};
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{StDtype, random_weights, tiny_qwen2, word_tokenizer_json, write_hf_dir};
use specx_decoder::{LoadedModel, check_pair, pair_up};

/// Padded rows of the target past the tokenizer's `SMALL_VOCAB` ids.
const PAD: usize = 2;

/// A target of `SMALL_VOCAB + PAD` logits and a draft of `SMALL_VOCAB`, one tokenizer of
/// `SMALL_VOCAB` words; the draft already paired.
fn padded_pair(dir: &std::path::Path) -> (LoadedModel, LoadedModel) {
    let tok = word_tokenizer_json(SMALL_VOCAB, "w");
    let tcfg = tiny_qwen2(SMALL_VOCAB + PAD);
    let dcfg = tiny_qwen2(SMALL_VOCAB);
    write_hf_dir(&dir.join("t"), &tcfg, &random_weights(&tcfg, 11), StDtype::F32, 1, &tok).unwrap();
    write_hf_dir(&dir.join("d"), &dcfg, &random_weights(&dcfg, 12), StDtype::F32, 1, &tok).unwrap();
    let (t, mut d) = (load(&dir.join("t")), load(&dir.join("d")));
    pair_up(&mut d, &t).unwrap();
    (t, d)
}

/// The draft, checking that no candidate is a padded id and that q has the target's length
/// with no mass on the padded ids.
struct NoPaddedIds<'m> {
    inner: PlainDrafter<'m>,
    drafted: usize,
}

impl Drafter for NoPaddedIds<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let out = self.inner.draft(round)?;
        for c in &out {
            assert!((c.token as usize) < SMALL_VOCAB, "the draft proposed the padded id {}", c.token);
            assert_eq!(c.q.len(), SMALL_VOCAB + PAD, "q of the draft's own length");
            assert!(c.q[SMALL_VOCAB..].iter().all(|&x| x == 0.0), "q puts mass on padded ids: {:?}", c.q);
        }
        self.drafted += out.len();
        Ok(out)
    }
    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

/// A verifier whose residual keeps the shared vocabulary only: what comparing the rows up to
/// the draft's length would do.
struct SharedVocabularyResidual;

impl Verifier for SharedVocabularyResidual {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        let p = s.probabilities(logits);
        if rng.random::<f64>() * (c.q_token as f64) < p[c.token as usize] as f64 {
            return Verdict::Accept;
        }
        Verdict::Reject(sample_from(&residual_distribution(&p[..SMALL_VOCAB], &c.q[..SMALL_VOCAB]), rng))
    }
}

#[test]
fn a_padded_target_pairs_with_an_unpadded_draft_and_stays_lossless() {
    const ALPHA: f64 = 1e-3;
    let dir = tempfile::tempdir().unwrap();
    let (t, d) = padded_pair(dir.path());
    assert_eq!((d.model.config().vocab_size, d.model.output_vocab()), (SMALL_VOCAB, SMALL_VOCAB + PAD));
    let mut cache = d.model.new_cache(1);
    let row = d.model.forward(&[1, 4, 2], &mut cache).unwrap().logits_tail(1).remove(0);
    assert!(row[SMALL_VOCAB..].iter().all(|x| *x == f32::NEG_INFINITY), "padded logits {:?}", &row[SMALL_VOCAB..]);
    // A padded id the target drew reaches the draft as a token it can read.
    d.model.forward(&[SMALL_VOCAB as u32 + 1], &mut cache).unwrap();

    let short = Short::at_t1(&t.model);
    let padded_mass: f64 =
        short.exact.iter().filter(|(k, _)| k.iter().any(|&x| x as usize >= SMALL_VOCAB)).map(|(_, p)| p).sum();
    assert!(padded_mass > 0.05, "the padded ids carry only {padded_mass} of the target's mass");
    let mut drafted = 0;
    let counts = sample_counts(SAMPLES, |seed| {
        let mut drafter = NoPaddedIds { inner: PlainDrafter::new(&d.model), drafted: 0 };
        let c = short.cfg(seed);
        let g =
            generate_speculative(&t.model, &mut drafter, &mut FixedK(2), &mut RejectionSampler, &short.prompt, &c, &[])
                .unwrap();
        drafted += drafter.drafted;
        g.tokens
    });
    assert!(drafted > SAMPLES, "the drafter proposed only {drafted} candidates");
    let with_padded: usize =
        counts.iter().filter(|(k, _)| k.iter().any(|&x| x as usize >= SMALL_VOCAB)).map(|(_, c)| c).sum();
    let p_ok = chi_square_p(&counts, &short.exact, SAMPLES);
    assert!(p_ok > ALPHA, "speculative sampling with a padded target rejected: p = {p_ok:.2e}");
    let p_bad = short.p(|seed| {
        let mut drafter = PlainDrafter::new(&d.model);
        let mut broken = SharedVocabularyResidual;
        generate_speculative(&t.model, &mut drafter, &mut FixedK(2), &mut broken, &short.prompt, &short.cfg(seed), &[])
            .unwrap()
            .tokens
    });
    assert!(p_bad < ALPHA, "a residual without the padded ids went unnoticed: p = {p_bad:.2e}");
    eprintln!(
        "padded pair: chi-square p {p_ok:.3} (residual without padded ids: {p_bad:.2e}); {with_padded} of {SAMPLES} samples hold a padded id"
    );

    // Greedy: the target's own output.
    let greedy = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
    for p in [vec![1u32, 4, 2], vec![0, 3], vec![5, 5, 1, 2]] {
        let ar = generate_autoregressive(&t.model, &p, &greedy, &[]).unwrap().tokens;
        let mut drafter = PlainDrafter::new(&d.model);
        let g = generate_speculative(&t.model, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &p, &greedy, &[])
            .unwrap();
        assert_eq!(g.tokens, ar, "prompt {p:?}");
    }
}

#[test]
fn a_draft_larger_than_its_target_or_with_other_tokens_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (t, d) = padded_pair(dir.path());
    let e = format!("{:#}", check_pair(&t, &d).unwrap_err());
    assert!(e.contains("the draft scores 8 tokens but the target only 6"), "{e}");
    let cfg = tiny_qwen2(SMALL_VOCAB);
    let mut words = word_tokenizer_json(SMALL_VOCAB, "w");
    words = words.replace("\"w3\":3", "\"x3\":3");
    write_hf_dir(&dir.path().join("o"), &cfg, &random_weights(&cfg, 3), StDtype::F32, 1, &words).unwrap();
    let e = format!("{:#}", check_pair(&load(&dir.path().join("o")), &t).unwrap_err());
    assert!(e.contains("id 3 is \"x3\" in one and id 3 is \"w3\" in the other"), "{e}");
}
