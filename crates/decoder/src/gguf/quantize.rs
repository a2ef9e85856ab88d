//! Round-to-nearest quantizers for the 32-value block types, as ggml's reference
//! `quantize_row_*_ref` functions compute them. They make quantized synthetic models for tests
//! (the K-quants' scale search of llama.cpp is not reproduced: real K-quant files come from
//! llama.cpp).

use super::dequant::GgmlType;
use anyhow::{Result, bail};
use half::f16;

/// Quantizes `x` (a whole number of 32-value blocks) to `ty` (Q8_0, Q4_0, Q4_1, Q5_0, F16, BF16
/// or F32).
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(ty.byte_size(x.len())?);
    match ty {
        GgmlType::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x.iter().for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x.iter().for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => x.chunks_exact(32).for_each(|b| q8_0(b, &mut out)),
        GgmlType::Q4_0 => x.chunks_exact(32).for_each(|b| q4_0(b, &mut out)),
        GgmlType::Q4_1 => x.chunks_exact(32).for_each(|b| q4_1(b, &mut out)),
        GgmlType::Q5_0 => x.chunks_exact(32).for_each(|b| q5_0(b, &mut out)),
        other => bail!("no quantizer for {other:?} (Q8_0, Q4_0, Q4_1, Q5_0, F16, BF16, F32)"),
    }
    Ok(out)
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// The value of largest magnitude, with its sign (ggml's `max` in the 4/5-bit quantizers).
fn signed_max(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_max(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i32).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = x.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i32).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

fn q5_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_max(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 16.5) as i32).min(31) as u32;
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        let (lo, hi) = (q(x[j]), q(x[j + 16]));
        qs[j] = (lo & 0x0f) as u8 | (((hi & 0x0f) as u8) << 4);
        qh |= ((lo & 0x10) >> 4) << j;
        qh |= ((hi & 0x10) >> 4) << (j + 16);
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize;

    #[test]
    fn round_trips_within_half_a_step() {
        // Half a quantization step, plus up to 127 steps times the f16 rounding of the scale
        // (2^-11 relative): 0.57 steps. The 4/5-bit types reach `steps` on the side of the
        // largest magnitude and one step less on the other (ggml's ranges): values beyond
        // that clamp.
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        for (ty, steps, other_side) in
            [(GgmlType::Q8_0, 127.0, 127.0), (GgmlType::Q4_0, 8.0, 7.0), (GgmlType::Q5_0, 16.0, 15.0)]
        {
            let bytes = quantize(ty, &x).unwrap();
            let mut y = vec![0f32; x.len()];
            dequantize(ty, &bytes, &mut y).unwrap();
            for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let step = signed_max(xs).abs() / steps;
                for (a, c) in xs.iter().zip(ys) {
                    let clamp = (a.abs() - other_side * step).max(0.0);
                    assert!((a - c).abs() <= step * 0.57 + clamp + 1e-6, "{ty:?} block {b}: {a} -> {c} (step {step})");
                }
            }
        }
    }
}
