//! Device memory for collectives, allocated with `cuMemAlloc` as nccl-tests
//! and PyTorch's caching allocator hold theirs. Consumes a stream and bytes or
//! a length; produces a [`DeviceBytes`] that derefs to a `CudaSlice<u8>`, freed
//! on drop only once every stream named by [`DeviceBytes::used_by`] has drained
//! (docs/METHODS.md, "Collective buffers on the device"). Refuses nothing
//! beyond what the driver refuses (out of memory; a zero-length allocation
//! keeps one byte instead).
use anyhow::{Context, Result};
use cudarc::driver::{result, sys, CudaSlice, CudaStream};
use std::sync::Arc;

/// A `cuMemAlloc` allocation viewed as a `CudaSlice<u8>`.
pub struct DeviceBytes {
    slice: Option<CudaSlice<u8>>,
    /// Streams besides the allocating one that work on this buffer.
    users: Vec<Arc<CudaStream>>,
}

impl DeviceBytes {
    /// `len` bytes (at least one), not yet written.
    fn alloc(stream: &Arc<CudaStream>, len: usize) -> Result<Self> {
        stream.context().bind_to_thread().context("binding the CUDA context")?;
        // SAFETY: a plain allocation of at least one byte in the current (bound) context.
        let ptr = unsafe { result::malloc_sync(len.max(1)) }
            .with_context(|| format!("cuMemAlloc of {} bytes", len.max(1)))?;
        // SAFETY: `ptr` is a live allocation of `len.max(1)` bytes; every
        // constructor writes it (zeroes or a copy) before anything reads it.
        let slice = unsafe { stream.upgrade_device_ptr::<u8>(ptr, len.max(1)) };
        Ok(Self { slice: Some(slice), users: Vec::new() })
    }

    /// `len` bytes (at least one), zeroed in `stream`'s order.
    pub fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<Self> {
        let mut out = Self::alloc(stream, len)?;
        stream.memset_zeros(&mut *out).context("cuMemsetD8Async (zeroing a collective buffer)")?;
        Ok(out)
    }

    /// A copy of `host` (one zero byte where `host` is empty).
    pub fn from_host(stream: &Arc<CudaStream>, host: &[u8]) -> Result<Self> {
        if host.is_empty() {
            return Self::zeros(stream, 0);
        }
        let mut out = Self::alloc(stream, host.len())?;
        stream.memcpy_htod(host, &mut *out).context("copying a collective buffer to the device")?;
        Ok(out)
    }

    /// Name another stream that works on this buffer (checked before it is freed).
    pub fn used_by(mut self, stream: &Arc<CudaStream>) -> Self {
        self.users.push(stream.clone());
        self
    }
}

impl std::ops::Deref for DeviceBytes {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        self.slice.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for DeviceBytes {
    fn deref_mut(&mut self) -> &mut CudaSlice<u8> {
        self.slice.as_mut().expect("present until drop")
    }
}

impl Drop for DeviceBytes {
    fn drop(&mut self) {
        if let Some(slice) = self.slice.take() {
            let stream = slice.stream().clone();
            let bound = stream.context().bind_to_thread().is_ok();
            // SAFETY: cuStreamQuery only reads the state of live streams of this (bound) context.
            let drained = bound
                && std::iter::once(&stream)
                    .chain(&self.users)
                    .all(|s| unsafe { sys::cuStreamQuery(s.cu_stream()) } == sys::CUresult::CUDA_SUCCESS);
            let ptr = slice.leak();
            if drained {
                // SAFETY: `ptr` came from cuMemAlloc in this context, and every
                // stream named as a user has drained, so no queued work refers to it.
                let _ = unsafe { result::free_sync(ptr) };
            }
        }
    }
}
