//! A few bytes of results (min/max ranges, an element counter) read back
//! without waiting for the GPU: copied into a small mappable buffer at the
//! end of the frame's submission and picked up once mapped, a frame or so
//! later.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::gpu::{Gpu, GpuError};

/// Four pieces of 8 bytes: ranges, or an element counter.
const PIECES: usize = 4;
const BYTES: u64 = 8 * PIECES as u64;

const WAITING: u8 = 0;
const MAPPED: u8 = 1;
const FAILED: u8 = 2;

/// What came back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Values {
    pub range: (f32, f32),
    pub count: u32,
    /// The elements did not fit their buffer (`count` says how many there were).
    pub overflow: bool,
    /// Every piece read as a range (the first is `range`, the second the
    /// same bytes as `count` and `overflow`).
    pub ranges: [(f32, f32); PIECES],
}

/// One read-back: its buffer, whether its mapping was asked for, and
/// whether it is mapped yet.
pub struct Readback {
    buffer: wgpu::Buffer,
    asked: bool,
    state: Arc<AtomicU8>,
}

impl Readback {
    /// Asks for the mapping (after the submission that fills it).
    pub fn map(&mut self) {
        self.asked = true;
        let state = self.state.clone();
        self.buffer
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                let s = if r.is_ok() { MAPPED } else { FAILED };
                state.store(s, Ordering::Release);
            });
    }
}

/// Read-backs in flight, each with what it belongs to (`K`), and spare buffers.
pub struct Readbacks<K> {
    pub pending: Vec<(Readback, K)>,
    spare: Vec<wgpu::Buffer>,
}

impl<K> Default for Readbacks<K> {
    fn default() -> Self {
        Readbacks {
            pending: Vec::new(),
            spare: Vec::new(),
        }
    }
}

impl<K> Readbacks<K> {
    /// Records copies of 8 bytes at an offset of each of `pieces` (a range:
    /// two f32; a counter: its count and overflow flag; zeros for none) into
    /// a spare read-back buffer (a new one when all are in flight: every
    /// frame's values come back, the last one before a pause included).
    /// Push it to `pending`; [`Readbacks::map_submitted`] maps it once the
    /// encoder is submitted.
    pub fn start(
        &mut self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        pieces: [Option<(&wgpu::Buffer, u64)>; PIECES],
    ) -> Readback {
        let buffer = self.spare.pop().unwrap_or_else(|| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: BYTES,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        for (k, piece) in pieces.into_iter().enumerate() {
            let to = 8 * k as u64;
            match piece {
                Some((from, at)) => encoder.copy_buffer_to_buffer(from, at, &buffer, to, 8),
                None => encoder.clear_buffer(&buffer, to, Some(8)),
            }
        }
        Readback {
            buffer,
            asked: false,
            state: Arc::new(AtomicU8::new(WAITING)),
        }
    }

    /// Asks for the mappings of the read-backs not asked for yet: call
    /// after the submission that fills them.
    pub fn map_submitted(&mut self) {
        for (r, _) in &mut self.pending {
            if !r.asked {
                r.map();
            }
        }
    }

    /// The read-backs that are mapped, oldest first (the device must have
    /// been polled since they were submitted).
    pub fn take_ready(&mut self) -> Result<Vec<(Values, K)>, GpuError> {
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        let mut failed = false;
        for (r, key) in std::mem::take(&mut self.pending) {
            match r.state.load(Ordering::Acquire) {
                WAITING => waiting.push((r, key)),
                MAPPED => {
                    let values = r.buffer.slice(..).get_mapped_range().ok().map(|bytes| {
                        let f: &[f32] = bytemuck::cast_slice(&bytes);
                        let u: &[u32] = bytemuck::cast_slice(&bytes);
                        Values {
                            range: (f[0], f[1]),
                            count: u[2],
                            overflow: u[3] != 0,
                            ranges: std::array::from_fn(|k| (f[2 * k], f[2 * k + 1])),
                        }
                    });
                    r.buffer.unmap();
                    match values {
                        Some(v) => {
                            self.spare.push(r.buffer);
                            ready.push((v, key));
                        }
                        None => failed = true,
                    }
                }
                _ => failed = true,
            }
        }
        self.pending = waiting;
        if failed {
            return Err(GpuError::Device(
                "a read-back from the GPU failed (the device may be lost)".into(),
            ));
        }
        Ok(ready)
    }
}
