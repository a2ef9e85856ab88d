//! What a model's forwards move between its devices, counted: for a model split in layer
//! ranges ([`Transformer::load_split`]) or with attentions placed on other devices
//! ([`Transformer::place_attention`]) the traffic of a call is part of its cost, and the
//! multi-device checks bound it.

use super::Transformer;
use burn::tensor::{Device, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};

/// The running counts of one model (shared by its clones).
#[derive(Debug, Default)]
pub(super) struct MoveCounter {
    hidden: AtomicU64,
    hidden_bytes: AtomicU64,
    tables: AtomicU64,
}

/// Tensors moved between devices since the model was loaded ([`Transformer::device_moves`]);
/// subtract two readings for one call's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMoves {
    /// Hidden-state tensors moved: the residual stream at a range boundary, a placed
    /// attention's input and output.
    pub hidden: u64,
    /// Their bytes (f32 activations).
    pub hidden_bytes: u64,
    /// Sets of position tables (RoPE's cos and sin, the row mask) copied to a device other
    /// than the first: one per extra device a call reaches.
    pub tables: u64,
}

impl std::ops::Sub for DeviceMoves {
    type Output = DeviceMoves;

    fn sub(self, o: DeviceMoves) -> DeviceMoves {
        DeviceMoves {
            hidden: self.hidden - o.hidden,
            hidden_bytes: self.hidden_bytes - o.hidden_bytes,
            tables: self.tables - o.tables,
        }
    }
}

impl Transformer {
    /// Tensors this model's forwards have moved between its devices so far (zero on one device).
    pub fn device_moves(&self) -> DeviceMoves {
        let c = &self.moves;
        DeviceMoves {
            hidden: c.hidden.load(Ordering::Relaxed),
            hidden_bytes: c.hidden_bytes.load(Ordering::Relaxed),
            tables: c.tables.load(Ordering::Relaxed),
        }
    }

    /// Hidden states `t` moved to `device`, counted.
    pub(super) fn move_hidden(&self, t: Tensor<3>, device: &Device) -> Tensor<3> {
        self.moves.hidden.fetch_add(1, Ordering::Relaxed);
        self.moves.hidden_bytes.fetch_add(4 * t.shape().num_elements() as u64, Ordering::Relaxed);
        t.to_device(device)
    }

    /// `t` on `devices[index]`, moved (and counted) only when it is elsewhere.
    pub(super) fn on_device(&self, t: Tensor<3>, index: usize) -> Tensor<3> {
        let device = &self.devices[index];
        if t.device() == *device { t } else { self.move_hidden(t, device) }
    }

    /// Counts one set of position tables copied to another device.
    pub(super) fn count_tables_moved(&self) {
        self.moves.tables.fetch_add(1, Ordering::Relaxed);
    }
}
