//! GGUF blocks on a GPU ([`crate::cube::DeviceBlocks`]) under one name in every build. A build
//! without a GPU backend has no device to hold them: there the type has no values, so the
//! model's code paths for it are never reached and need no stand-in behaviour.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) use crate::cube::{DeviceBlocks, on_device};

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
pub(crate) use absent::{DeviceBlocks, on_device};

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
mod absent {
    use crate::Device;
    use crate::fusion::Fused;
    use crate::gguf::GgmlType;
    use crate::quant::QuantMatrix;
    use anyhow::{Result, bail};
    use burn::tensor::Tensor;

    /// No values: nothing can be uploaded without a GPU backend.
    #[derive(Clone)]
    pub(crate) enum DeviceBlocks {}

    /// No block type has a device kernel without a GPU backend.
    pub(crate) fn on_device(_: GgmlType) -> bool {
        false
    }

    impl DeviceBlocks {
        pub(crate) fn upload(_: &QuantMatrix, _: &Device) -> Result<Self> {
            bail!("GGUF blocks on a device need a build with a GPU backend (--features wgpu or cuda)")
        }
        pub(crate) fn device(&self) -> Device {
            match *self {}
        }
        pub(crate) fn byte_len(&self) -> usize {
            match *self {}
        }
        pub(crate) fn matmul(&self, _: Tensor<3>, _: Option<&Tensor<1>>) -> Tensor<3> {
            match *self {}
        }
        pub(crate) fn product(&self, _: Tensor<3>, _: Fused) -> Tensor<3> {
            match *self {}
        }
        pub(crate) fn pieces(&self) -> usize {
            match *self {}
        }
        pub(crate) fn lookup(&self, _: &[u32]) -> Tensor<2> {
            match *self {}
        }
        pub(crate) fn to_host(&self) -> Result<QuantMatrix> {
            match *self {}
        }
    }
}
