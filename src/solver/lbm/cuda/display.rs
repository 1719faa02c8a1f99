//! Display frames of the CUDA solver: block means of the fields made on the
//! solver's stream, copied to pinned host memory on a stream of their own
//! while the solver steps on, and optionally written into GPU memory exported
//! to Vulkan (CUDA VMM, POSIX file descriptors) for the window to import.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut, PinnedHostSlice,
};

use super::{dev, fill_nan, CudaSolver, LaunchConfig, PushKernelArg};
use crate::solver::display::{self, SharedFrame, SharedLease};
use crate::solver::{Fields, SolverError, TakenFrame, MAX_STABLE_SPEED};
use crate::system::human_bytes;

/// Display frames under way (see [`Solver::begin_display`]): averaged on the
/// solver's stream into a device slot, then copied on `copy` into pinned host
/// memory while the solver steps on. Three slots, so that frames can start
/// while earlier ones are still copying (a copy to the host of a 256³ frame
/// takes longer than a chunk of steps on the H100); the newest finished one
/// wins.
pub(super) struct Display {
    copy: Arc<CudaStream>,
    stride: usize,
    pub(super) size: [usize; 3],
    slots: [DisplaySlot; 3],
    next: usize,
}

struct DisplaySlot {
    device: CudaSlice<f32>,
    /// The texels of the frame for the graphics device, when it shares them.
    shared: Option<Exported>,
    /// Held from the write of `shared` until the frame is taken or dropped.
    lease: Option<SharedLease>,
    /// Set by the kernel where the frame is unstable, and its host copy.
    unstable: CudaSlice<u32>,
    unstable_host: PinnedHostSlice<u32>,
    /// Whether the frame in this slot is copied into `host`.
    host_copy: bool,
    /// Cached (not write-combined) pinned memory: the host reads it.
    host: PinnedHostSlice<f32>,
    computed: CudaEvent,
    copied: CudaEvent,
    /// The step of the frame in this slot, until it is taken or dropped.
    step: Option<u64>,
}

impl DisplaySlot {
    fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<Self, SolverError> {
        let short = |what: &str, e: cudarc::driver::DriverError| {
            SolverError::Device(format!(
                "no {what} memory left for a display frame ({}): {e}; lower the display limit",
                human_bytes(4 * len as u64)
            ))
        };
        Ok(DisplaySlot {
            device: stream
                .alloc_zeros::<f32>(len)
                .map_err(|e| short("GPU", e))?,
            // SAFETY: written by the copy before it is read (`step` is set then).
            host: unsafe { ctx.alloc_pinned_with_flags::<f32>(len, 0) }
                .map_err(|e| short("pinned host", e))?,
            computed: ctx.new_event(None).map_err(dev)?,
            copied: ctx.new_event(None).map_err(dev)?,
            step: None,
            shared: None,
            lease: None,
            unstable: stream.alloc_zeros::<u32>(1).map_err(|e| short("GPU", e))?,
            // SAFETY: written by the copy before it is read, as `host`.
            unstable_host: unsafe { ctx.alloc_pinned_with_flags::<u32>(1, 0) }
                .map_err(|e| short("pinned host", e))?,
            host_copy: true,
        })
    }
}

/// GPU memory exported as a POSIX file descriptor (CUDA's virtual memory
/// management API) and mapped here: a display frame's texels that Vulkan
/// imports ([`SharedFrame`]).
struct Exported {
    ctx: Arc<CudaContext>,
    handle: sys::CUmemGenericAllocationHandle,
    /// Reserved address range (0: none yet) and whether it is mapped.
    ptr: sys::CUdeviceptr,
    mapped: bool,
    frame: Arc<SharedFrame>,
    bytes: usize,
}

impl Exported {
    fn new(ctx: &Arc<CudaContext>, size: [usize; 3], device: [u8; 16]) -> Result<Exported, String> {
        use std::os::fd::FromRawFd;
        let fail = |what: &str, e: cudarc::driver::DriverError| format!("{what}: {e}");
        ctx.bind_to_thread()
            .map_err(|e| fail("binding the context", e))?;
        // SAFETY: a plain C struct; zero is "unset" for every field not set here.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes =
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ctx.ordinal() as i32;
        let mut granularity = 0usize;
        // SAFETY: valid pointers to a local and to the property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .result()
        .map_err(|e| fail("allocation granularity", e))?;
        let data = display::texel_row_bytes(size[0]) * (size[1] * size[2]) as u64;
        let bytes = (data as usize).next_multiple_of(granularity.max(1));
        let mut handle = 0;
        // SAFETY: as above; the handle is released in Drop.
        unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) }
            .result()
            .map_err(|e| fail("exportable allocation", e))?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: a POSIX handle is an int written through the pointer.
        let exported = unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .result();
        if let Err(e) = exported {
            // SAFETY: the handle made above, used by nothing else.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(fail("exporting the allocation", e));
        }
        let mut out = Exported {
            ctx: ctx.clone(),
            handle,
            ptr: 0,
            mapped: false,
            frame: Arc::new(SharedFrame::new(
                // SAFETY: the descriptor the export just made, owned by nobody else.
                unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
                bytes as u64,
                size,
                device,
            )),
            bytes,
        };
        // SAFETY: reserve and map the whole allocation, then allow access
        // from this device; each step is undone in Drop.
        unsafe {
            sys::cuMemAddressReserve(&mut out.ptr, bytes, granularity, 0, 0)
                .result()
                .map_err(|e| fail("reserving addresses", e))?;
            sys::cuMemMap(out.ptr, bytes, 0, handle, 0)
                .result()
                .map_err(|e| fail("mapping", e))?;
            out.mapped = true;
            let access = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            sys::cuMemSetAccess(out.ptr, bytes, &access, 1)
                .result()
                .map_err(|e| fail("setting access", e))?;
        }
        Ok(out)
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // Errors here leave the memory to the context's teardown.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: undoes exactly what `new` did; the frame's importers hold
        // their own references to the memory.
        unsafe {
            if self.mapped {
                let _ = sys::cuMemUnmap(self.ptr, self.bytes);
            }
            if self.ptr != 0 {
                let _ = sys::cuMemAddressFree(self.ptr, self.bytes);
            }
            let _ = sys::cuMemRelease(self.handle);
        }
    }
}

/// A CUDA device UUID as the 16 bytes Vulkan reports too.
fn uuid_bytes(u: &sys::CUuuid) -> [u8; 16] {
    u.bytes.map(|b| b as u8)
}

impl CudaSolver {
    /// Forgets display frames under way (the state they show is gone).
    pub(super) fn drop_display_frames(&mut self) -> Result<(), SolverError> {
        if let Some(d) = &mut self.display {
            d.copy.synchronize().map_err(dev)?;
            for s in &mut d.slots {
                s.step = None;
                s.lease = None;
            }
        }
        Ok(())
    }

    pub(super) fn begin_display_frame(
        &mut self,
        stride: usize,
        host: bool,
    ) -> Result<bool, SolverError> {
        if self.link.is_some() {
            // A slab: the slab solver gathers the whole domain.
            return Ok(false);
        }
        let stride = stride.max(1);
        if self.display.as_ref().map(|d| d.stride) != Some(stride) {
            self.drop_display_frames()?;
            self.display = None;
            let size = display::coarse_size(self.grid.size, stride);
            let len = 4 * size.iter().product::<usize>();
            let copy = self.ctx.new_stream().map_err(dev)?;
            let mut slots = [
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
            ];
            if let Some(device) = self.share {
                for slot in &mut slots {
                    match Exported::new(&self.ctx, size, device) {
                        Ok(e) => slot.shared = Some(e),
                        Err(e) => {
                            // The host copy still shows every frame.
                            eprintln!("display frames go through host memory: {e}");
                            self.share = None;
                            break;
                        }
                    }
                }
                if self.share.is_none() {
                    slots.iter_mut().for_each(|s| s.shared = None);
                }
            }
            self.display = Some(Display {
                slots,
                copy,
                stride,
                size,
                next: 0,
            });
        }
        let parity = self.parity();
        let fill = self.reduction_config();
        // The fields the last step left, if it left them for this frame.
        let left = self
            .planes_left
            .take()
            .filter(|&s| s + 1 == self.t && self.frame_planes.is_some());
        let d = self.display.as_mut().expect("made above");
        let count = d.slots.len();
        let slot = &mut d.slots[d.next];
        if slot.step.is_some() && !slot.copied.try_is_complete().map_err(dev)? {
            // Still copying (a copy takes less than a chunk of steps, so this
            // is rare): this frame is skipped rather than waited for.
            return Ok(true);
        }
        d.next = (d.next + 1) % count;
        let m = d.size.iter().product::<usize>();
        if self.poison {
            fill_nan(&self.stream, &self.kernels.fill_f32, &mut slot.device, fill)?;
        }
        let (stride32, [mx, my, mz]) = (stride as u32, d.size.map(|v| v as u32));
        // The texels too, unless the graphics device still reads the last
        // frame of this slot (then this one shows through the host copy).
        slot.lease = None;
        slot.lease = slot.shared.as_ref().and_then(|e| e.frame.lease());
        let (texels, pitch) = match (&slot.lease, &slot.shared) {
            (Some(_), Some(e)) => (e.ptr, e.frame.row_bytes() / 16),
            _ => (0, 0),
        };
        slot.host_copy = host || texels == 0;
        self.stream.memset_zeros(&mut slot.unstable).map_err(dev)?;
        let max_speed2 = MAX_STABLE_SPEED * MAX_STABLE_SPEED;
        let cfg = LaunchConfig {
            grid_dim: ((m as u32).div_ceil(256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // The frame from the fields the last step left, or from the lattice:
        // each kernel's own first arguments, then the same ones.
        let planes = left.and(self.frame_planes.as_ref());
        let kernel = match planes {
            Some(_) => &self.kernels.display_planes,
            None => &self.kernels.display,
        };
        let mut b = self.stream.launch_builder(kernel);
        match planes {
            Some(planes) => {
                b.arg(planes).arg(&self.flags_dev).arg(&self.kparams);
            }
            None => {
                self.lattice.arg(&mut b);
                b.arg(&self.flags_dev).arg(&self.kparams).arg(&parity);
            }
        }
        b.arg(&stride32)
            .arg(&mx)
            .arg(&my)
            .arg(&mz)
            .arg(&mut slot.device)
            .arg(&texels)
            .arg(&pitch)
            .arg(&max_speed2)
            .arg(&mut slot.unstable);
        // SAFETY: the signatures of `display_planes` (`planes` holds 4n
        // floats) and `display_fields`; `device` holds 4 m floats, `texels`
        // (unless null) my·mz rows of `pitch` float4s.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        if planes.is_some() {
            self.frames_from_planes += 1;
        }
        slot.computed.record(&self.stream).map_err(dev)?;
        d.copy.wait(&slot.computed).map_err(dev)?;
        if slot.host_copy {
            d.copy
                .memcpy_dtoh(&slot.device, &mut slot.host)
                .map_err(dev)?;
        }
        d.copy
            .memcpy_dtoh(&slot.unstable, &mut slot.unstable_host)
            .map_err(dev)?;
        slot.copied.record(&d.copy).map_err(dev)?;
        slot.step = Some(left.unwrap_or(self.t));
        Ok(true)
    }

    /// Turns the display frames from the fields a step leaves on or off
    /// ([`Tuning::step_frames`](crate::system::Tuning)); the previous setting.
    pub fn set_step_frames(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.step_frames, on)
    }

    /// `n` steps, the last of which also leaves the fields of the state it
    /// reads in `frame_planes` for the display frame begun next, where that
    /// is on ([`Tuning::step_frames`](crate::system::Tuning)) and the GPU
    /// has room for them; else plain steps.
    pub(super) fn enqueue_leaving_fields(&mut self, n: u64) -> Result<(), SolverError> {
        use crate::solver::Solver;
        if !self.step_frames || n == 0 || self.link.is_some() {
            return self.enqueue(n);
        }
        if self.frame_planes.is_none() {
            let bytes = 16 * self.grid.cells() as u64;
            // Room for them and as much again: other buffers (time averages,
            // a larger display) should not fail for the sake of these.
            let free = self.ctx.mem_get_info().map_or(0, |(free, _)| free as u64);
            let planes = if free >= 2 * bytes {
                self.stream.alloc_zeros::<f32>(4 * self.grid.cells()).ok()
            } else {
                None
            };
            match planes {
                Some(p) => self.frame_planes = Some(p),
                None => {
                    eprintln!(
                        "display frames read the lattice: no room on the GPU for the {} of \
                         fields a step would leave for them",
                        human_bytes(bytes)
                    );
                    self.step_frames = false;
                    return self.enqueue(n);
                }
            }
        }
        self.enqueue(n - 1)?;
        let mut planes = self.frame_planes.take().expect("allocated above");
        let stream = self.stream.clone();
        // Bit 0 of the address: the density as well (velocity_planes).
        let (address, guard) = planes.device_ptr_mut(&stream);
        let launched = self.launch_step_leaving_velocity(address | 1);
        drop(guard);
        self.frame_planes = Some(planes);
        launched?;
        self.sample_if_due()?;
        self.planes_left = Some(self.t - 1);
        Ok(())
    }

    pub(super) fn take_display_frame(
        &mut self,
        out: &mut Fields,
    ) -> Result<Option<TakenFrame>, SolverError> {
        let Some(d) = self.display.as_mut() else {
            return Ok(None);
        };
        let mut newest: Option<(usize, u64)> = None;
        for (k, s) in d.slots.iter().enumerate() {
            let Some(step) = s.step else { continue };
            // Blocks the host only: the solver's stream steps on meanwhile.
            s.copied.synchronize().map_err(dev)?;
            if newest.is_none_or(|(_, t)| t < step) {
                newest = Some((k, step));
            }
        }
        let Some((k, step)) = newest else {
            return Ok(None);
        };
        let shared = d.slots[k].lease.take();
        // Older frames are dropped with it.
        for s in &mut d.slots {
            if s.step.is_some_and(|t| t <= step) {
                s.step = None;
                s.lease = None;
            }
        }
        let slot = &d.slots[k];
        let stable = slot.unstable_host.as_slice().map_err(dev)?[0] == 0;
        if slot.host_copy {
            out.copy_from_planes(d.size, slot.host.as_slice().map_err(dev)?);
        } else {
            out.size = d.size;
            for v in [&mut out.rho, &mut out.ux, &mut out.uy, &mut out.uz] {
                v.clear();
            }
        }
        Ok(Some(TakenFrame {
            step,
            shared,
            host: slot.host_copy,
            stable,
        }))
    }

    pub(super) fn set_shared_display(&mut self, device: Option<[u8; 16]>) {
        let ours = |d: &[u8; 16]| {
            self.link.is_none() && self.ctx.uuid().is_ok_and(|u| uuid_bytes(&u) == *d)
        };
        let share = device.filter(ours);
        if share != self.share {
            self.share = share;
            // New slots on the next frame, with or without shared texels.
            if self.drop_display_frames().is_ok() {
                self.display = None;
            }
        }
    }
}
