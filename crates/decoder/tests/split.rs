//! One model split in contiguous layer ranges over several devices ([`Transformer::load_split`],
//! `--device a+b`), here over the CPU named several times: the range bookkeeping (each layer's
//! weights and cache on its range's device, the embedding with the first range, the head with
//! the last, the residual stream handed from range to range) runs as on several devices, and
//! since every range computes on the same device the logits must equal the one-device model's
//! exactly. (`device_check::split_layers` runs the same over the CPU and a GPU.)

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::model::layer_ranges;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{StDtype, tiny_llama, tiny_qwen2};
use specx_decoder::{ModelConfig, SamplingConfig, WeightMode, default_device, load_model_split};

#[test]
fn ranges_are_contiguous_balanced_and_refuse_more_devices_than_layers() {
    assert_eq!(layer_ranges(28, 3).unwrap(), vec![0..10, 10..19, 19..28]);
    assert_eq!(layer_ranges(2, 2).unwrap(), vec![0..1, 1..2]);
    assert_eq!(layer_ranges(5, 1).unwrap(), vec![0..5]);
    let e = layer_ranges(2, 3).unwrap_err().to_string();
    assert!(e.contains("2 layers cannot be split over 3 device(s)"), "{e}");
}

#[test]
fn a_split_model_computes_the_one_device_logits_exactly_through_a_rollback() {
    let cpu = default_device();
    for (cfg, ty) in [
        (ModelConfig { num_hidden_layers: 5, ..tiny_qwen2(VOCAB) }, GgmlType::Q8_0),
        (ModelConfig { num_hidden_layers: 4, ..tiny_llama(VOCAB) }, GgmlType::F32),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (hf, gguf) = write_both(dir.path(), &cfg, 9, StDtype::F32, ty);
        for (path, mode) in [(&hf, WeightMode::F32), (&gguf, WeightMode::Native), (&gguf, WeightMode::Q8)] {
            let one = load_model_split(path, None, std::slice::from_ref(&cpu), mode).unwrap();
            assert!(!one.model.is_split());
            for parts in [2, 3] {
                let split = load_model_split(path, None, &vec![cpu.clone(); parts], mode).unwrap();
                assert!(split.model.is_split(), "{parts} parts");
                let (mut a, mut b) = (one.model.new_cache(1), split.model.new_cache(1));
                for (step, chunk) in
                    [tokens(11, 1), vec![5], tokens(5, 2), vec![9], tokens(3, 4)].into_iter().enumerate()
                {
                    let (x, y) = (
                        rows(&one.model.forward(&chunk, &mut a).unwrap()),
                        rows(&split.model.forward(&chunk, &mut b).unwrap()),
                    );
                    assert_eq!(x, y, "{} {mode} over {parts}: step {step}", cfg.architecture);
                    if step == 2 {
                        // A rejected speculation: every range's cache rolls back together.
                        a.truncate(a.len() - 4);
                        b.truncate(b.len() - 4);
                    }
                }
                assert_eq!(a.len(), b.len());
                for layer in 0..cfg.num_hidden_layers {
                    assert_eq!(a.layer_data(layer), b.layer_data(layer), "layer {layer} cache");
                }
            }
        }
    }
}

#[test]
fn greedy_speculative_and_dsi_with_split_targets_give_the_target_greedy_output() {
    let cpu = default_device();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ModelConfig { num_hidden_layers: 4, ..tiny_qwen2(VOCAB) };
    let (hf, _) = write_both(dir.path(), &cfg, 1, StDtype::F32, GgmlType::F32);
    let one = load_model_split(&hf, None, std::slice::from_ref(&cpu), WeightMode::F32).unwrap();
    let split = load_model_split(&hf, None, &[cpu.clone(), cpu.clone()], WeightMode::F32).unwrap();
    let draft = noisy_draft(dir.path(), VOCAB, 1, 0.2);
    let eos = [VOCAB as u32 - 1];
    for p in 0..3u32 {
        let prompt = tokens(5 + p as usize, 30 + p);
        let spec = SpecConfig { max_new_tokens: 14, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(&one.model, &prompt, &spec, &eos).unwrap().tokens;
        assert_eq!(generate_autoregressive(&split.model, &prompt, &spec, &eos).unwrap().tokens, want, "prompt {p}: AR");
        let got = generate_speculative(
            &split.model,
            &mut PlainDrafter::new(&draft.model),
            &mut FixedK(3),
            &mut RejectionSampler,
            &prompt,
            &spec,
            &eos,
        )
        .unwrap();
        assert_eq!(got.tokens, want, "prompt {p}: speculative");
        // DSI: one worker on the one-device target, one spanning two (split) devices.
        let dsi = generate_dsi(
            &[&one.model, &split.model],
            &mut PlainDrafter::new(&draft.model),
            &mut FixedK(3),
            &mut RejectionSampler,
            &prompt,
            &spec,
            &DsiConfig::new(2, 3),
            &eos,
        )
        .unwrap();
        assert_eq!(dsi.generation.tokens, want, "prompt {p}: DSI");
    }
    // EasySpec's attention placement and batched forwards need a model on one device.
    let split_draft = load_model_split(&hf, None, &[cpu.clone(), cpu.clone()], WeightMode::F32).unwrap();
    assert!(split_draft.model.place_attention(std::slice::from_ref(&cpu)).err().unwrap().to_string().contains("split"));
}

#[test]
fn a_split_naming_more_devices_than_layers_fails_before_loading() {
    let dir = tempfile::tempdir().unwrap();
    let (hf, _) = write_both(dir.path(), &tiny_qwen2(VOCAB), 1, StDtype::F32, GgmlType::F32);
    let e = load_model_split(&hf, None, &vec![default_device(); 3], WeightMode::F32).err().unwrap();
    assert!(format!("{e:#}").contains("2 layers cannot be split over 3 device(s)"), "{e:#}");
}
