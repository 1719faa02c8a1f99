//! The halo exchange of a CUDA solver that is one slab of a domain over
//! several GPUs (see [`crate::solver::lbm::slabs`]): NCCL or CUDA peer copies on a
//! stream of each slab's own, overlapped with the update of its interior.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaEvent, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};

use super::launch::REDUCTION_BLOCKS;
use super::{dev, CudaSolver};
use crate::solver::lbm::slabs::{Part, SlabLattice, Transfer};
use crate::solver::{ChangeSums, SolverError};
use crate::system::ranks::Peers;

/// A slab's side of the halo exchange (see [`super::slabs`]): its own stream,
/// so that the exchange overlaps the update of the slab's interior.
pub(super) struct SlabLink {
    pub(super) comm: Arc<CudaStream>,
    /// The layers next to the halos are updated (recorded on the solver's stream).
    pub(super) edges_done: CudaEvent,
    /// This slab's incoming transfers are done (recorded on `comm`).
    pub(super) comm_done: CudaEvent,
    /// The solver's stream must wait for `comm_done` before it touches the edges.
    pub(super) pending: bool,
}

/// How the slabs of a domain on several GPUs exchange their halos.
pub enum Transport {
    /// NCCL point-to-point sends and receives, grouped per exchange (one
    /// communicator per GPU, ranks in slab order).
    Nccl(Vec<NcclComm>),
    /// CUDA peer-to-peer copies (`cuMemcpyPeerAsync`), where NCCL is missing.
    Peer,
}

/// A masked write-back lands here first (on the receiving GPU), then
/// `unpack_planes` scatters the listed entries.
struct Staging {
    planes: CudaSlice<u8>,
    positions: CudaSlice<u32>,
    count: u32,
}

/// The exchange state of a [`super::slabs::SlabSolver`] on CUDA GPUs.
pub struct CudaLink {
    pub transport: Transport,
    /// One per write-back transfer, in order (None: unmasked).
    staging: Vec<Option<Staging>>,
    /// NCCL with the slabs of other processes (MPI), where each has a GPU of
    /// its own.
    remote: Option<RemoteLink>,
}

/// NCCL between processes: one communicator over every slab of the run
/// (ranks in slab order), bootstrapped over MPI.
struct RemoteLink {
    /// One per slab of this process.
    comms: Vec<NcclComm>,
    /// One per transfer to or from another process after an odd step, in
    /// order (Some: a masked write-back landing here).
    staging: Vec<Option<Staging>>,
}

impl CudaLink {
    pub fn name(&self) -> &'static str {
        match self.transport {
            Transport::Nccl(_) => "NCCL",
            Transport::Peer => "CUDA peer copies",
        }
    }
}

/// An NCCL communicator, destroyed on drop.
pub struct NcclComm(cudarc::nccl::sys::ncclComm_t);

// SAFETY: a communicator is a handle NCCL allows to be used from any one
// thread at a time; the solver that owns it is used by one thread at a time.
unsafe impl Send for NcclComm {}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: created by ncclCommInitAll, destroyed once.
        unsafe {
            let _ = cudarc::nccl::result::comm_destroy(self.0);
        }
    }
}

/// Which exchange to use: NCCL when its library loads, peer copies otherwise;
/// [`Tuning::exchange`] (`FLOWSCOPE_EXCHANGE=peer` or `=nccl`) forces one.
pub fn exchange_choice(forced: Option<&str>, nccl_present: bool) -> Result<bool, SolverError> {
    match forced {
        Some("peer") => Ok(false),
        Some("nccl") if nccl_present => Ok(true),
        Some("nccl") => Err(SolverError::Device(
            "FLOWSCOPE_EXCHANGE=nccl, but the NCCL library (libnccl.so.2) was not found; \
             install NCCL or unset FLOWSCOPE_EXCHANGE to use peer copies"
                .into(),
        )),
        Some(other) => Err(SolverError::InvalidParams(format!(
            "FLOWSCOPE_EXCHANGE={other}: use nccl or peer"
        ))),
        None => Ok(nccl_present),
    }
}

fn nccl_err(e: impl std::fmt::Debug) -> SolverError {
    SolverError::Device(format!("NCCL: {e:?}"))
}

impl CudaSolver {
    /// Device address of slot `slot`, layer `layer` of the lattice, and the
    /// bytes of one layer of one slot.
    pub(super) fn plane(&self, slot: usize, layer: usize) -> (sys::CUdeviceptr, usize) {
        let nxy = self.grid.size[0] * self.grid.size[1];
        let bytes = self.precision.bytes_per_population();
        let offset = (slot * self.grid.cells() + layer * nxy) * bytes;
        (self.lattice_ptr() + offset as u64, nxy * bytes)
    }

    /// Scatters a masked write-back's staged planes into the lattice, on the
    /// exchange stream.
    fn unpack(&mut self, st: &Staging, t: &Transfer) -> Result<(), SolverError> {
        if st.count == 0 {
            return Ok(());
        }
        let n = self.grid.cells() as u64;
        let nxy = (self.grid.size[0] * self.grid.size[1]) as u32;
        let layer = t.to_layer as u32;
        let s = t.slots.map(|v| v as u32);
        let cfg = LaunchConfig {
            grid_dim: (st.count.div_ceil(256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let comm = self.link().comm.clone();
        let mut b = comm.launch_builder(&self.kernels.unpack);
        self.lattice.arg_mut(&mut b);
        b.arg(&st.planes)
            .arg(&st.positions)
            .arg(&st.count)
            .arg(&n)
            .arg(&nxy)
            .arg(&layer)
            .arg(&s[0])
            .arg(&s[1])
            .arg(&s[2])
            .arg(&s[3])
            .arg(&s[4]);
        // SAFETY: signature of unpack_planes; positions index the five
        // staged planes and land inside the lattice.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        Ok(())
    }

    /// Staging planes for a masked write-back landing in this slab.
    fn staging(&self, mask: &[u32]) -> Result<Staging, SolverError> {
        let (_, bytes) = self.plane(0, 0);
        Ok(Staging {
            planes: self.stream.alloc_zeros::<u8>(5 * bytes).map_err(dev)?,
            positions: self
                .stream
                .clone_htod(if mask.is_empty() { &[0u32][..] } else { mask })
                .map_err(dev)?,
            count: mask.len() as u32,
        })
    }

    pub(super) fn link(&self) -> &SlabLink {
        self.link.as_ref().expect("a slab solver has a link")
    }

    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }
}

/// Bytes (a GPU's UUID, NCCL's id) as f32 bit patterns, four to a word, for
/// [`Peers`]' gathers.
fn words(bytes: &[std::ffi::c_char]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| {
            f32::from_bits(u32::from_ne_bytes([
                b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
            ]))
        })
        .collect()
}

/// A plane's bytes as populations on the wire: FP32 values, or 16-bit
/// patterns carried in the low half of an f32's bits.
fn populations_of(bytes: &[u8], precision: crate::solver::Precision, out: &mut [f32]) {
    match precision.bytes_per_population() {
        4 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        _ => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits(u16::from_ne_bytes([b[0], b[1]]) as u32);
            }
        }
    }
}

/// The inverse of [`populations_of`].
fn bytes_of(populations: &[f32], precision: crate::solver::Precision, out: &mut [u8]) {
    match precision.bytes_per_population() {
        4 => {
            for (b, v) in out.chunks_exact_mut(4).zip(populations) {
                b.copy_from_slice(&v.to_ne_bytes());
            }
        }
        _ => {
            for (b, v) in out.chunks_exact_mut(2).zip(populations) {
                b.copy_from_slice(&(v.to_bits() as u16).to_ne_bytes());
            }
        }
    }
}

impl SlabLattice for CudaSolver {
    type Link = CudaLink;

    fn link(
        slabs: &mut [Self],
        _fill: &[Transfer],
        write_back: &[Transfer],
    ) -> Result<CudaLink, SolverError> {
        let mut staging = Vec::with_capacity(write_back.len());
        for t in write_back {
            staging.push(match &t.mask {
                None => None,
                Some(mask) => Some(slabs[t.to].staging(mask)?),
            });
        }
        for s in slabs.iter() {
            s.stream.synchronize().map_err(dev)?;
        }
        // SAFETY: only tries to open the library.
        let present = unsafe { cudarc::nccl::sys::is_culib_present() };
        let forced = slabs.first().and_then(|s| s.exchange.clone());
        if !exchange_choice(forced.as_deref(), present)? {
            for a in 0..slabs.len() {
                for b in 0..slabs.len() {
                    if a == b {
                        continue;
                    }
                    let peer = slabs[b].ctx.cu_ctx();
                    slabs[a].ctx.bind_to_thread().map_err(dev)?;
                    // SAFETY: both contexts are alive. "Already enabled" is fine,
                    // and without peer access the copies still work (staged by
                    // the driver), so the result is not an error.
                    let _ = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
                }
            }
            return Ok(CudaLink {
                transport: Transport::Peer,
                staging,
                remote: None,
            });
        }
        // NVLink multicast (NVLS) stays off: this program never needs it, and the
        // lent machines must not create multicast objects.
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        let ordinals: Vec<i32> = slabs.iter().map(|s| s.ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); slabs.len()];
        // SAFETY: `comms` has one slot per device in `ordinals`.
        unsafe {
            cudarc::nccl::result::comm_init_all(
                comms.as_mut_ptr(),
                ordinals.len() as i32,
                ordinals.as_ptr(),
            )
        }
        .map_err(nccl_err)?;
        Ok(CudaLink {
            transport: Transport::Nccl(comms.into_iter().map(NcclComm).collect()),
            staging,
            remote: None,
        })
    }

    /// NCCL where every process has GPUs of its own (told apart by UUID, so
    /// that processes seeing one GPU each as device 0 still count as
    /// distinct) and the library loads everywhere; `FLOWSCOPE_EXCHANGE=nccl`
    /// insists, `=peer` keeps the host. Every process decides alike.
    fn link_remote(
        link: &mut CudaLink,
        slabs: &mut [Self],
        held: Range<usize>,
        count: usize,
        peers: &dyn Peers,
        write_back: &[(i32, Transfer)],
    ) -> Result<bool, SolverError> {
        let forced = slabs.first().and_then(|s| s.exchange.clone());
        // SAFETY: only tries to open the library.
        let present = unsafe { cudarc::nccl::sys::is_culib_present() };
        let missing = peers.any(!present);
        let mut mine = Vec::new();
        for s in slabs.iter() {
            mine.extend(words(&s.ctx.uuid().map_err(dev)?.bytes));
        }
        let all: Vec<u32> = peers
            .all_gather_f32(&mine)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let gpus: Vec<&[u32]> = all.chunks_exact(4).collect();
        let shared = (0..gpus.len()).find_map(|a| {
            (a + 1..gpus.len())
                .find(|&b| gpus[a] == gpus[b])
                .map(|b| (a, b))
        });
        let nccl = match (forced.as_deref(), missing, shared) {
            (Some("peer"), ..) => false,
            (Some("nccl"), true, _) => {
                return Err(SolverError::Device(
                    "FLOWSCOPE_EXCHANGE=nccl, but a process did not find the NCCL library \
                     (libnccl.so.2); install NCCL on every machine or unset FLOWSCOPE_EXCHANGE \
                     to pass the halos through the host"
                        .into(),
                ))
            }
            (Some("nccl"), false, Some((a, b))) => {
                return Err(SolverError::Device(format!(
                    "FLOWSCOPE_EXCHANGE=nccl, but slabs {a} and {b} share one GPU, which NCCL \
                     cannot serve twice; start one process per GPU, or unset \
                     FLOWSCOPE_EXCHANGE to pass the halos through the host"
                )))
            }
            (_, missing, shared) => !missing && shared.is_none(),
        };
        if !nccl {
            return Ok(false);
        }
        // The run's NCCL id comes from rank 0.
        let id: Vec<f32> = if peers.rank() == 0 {
            words(
                &cudarc::nccl::result::get_uniqueid()
                    .map_err(nccl_err)?
                    .internal,
            )
        } else {
            Vec::new()
        };
        let id = peers.all_gather_f32(&id);
        let mut unique = cudarc::nccl::sys::ncclUniqueId { internal: [0; 128] };
        for (k, v) in id.iter().enumerate() {
            for (j, byte) in v.to_bits().to_ne_bytes().into_iter().enumerate() {
                unique.internal[4 * k + j] = byte as _;
            }
        }
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        let mut comms = Vec::with_capacity(slabs.len());
        cudarc::nccl::result::group_start().map_err(nccl_err)?;
        for (s, slab) in held.clone().zip(slabs.iter()) {
            slab.ctx.bind_to_thread().map_err(dev)?;
            let mut comm = std::ptr::null_mut();
            // SAFETY: one communicator per slab, ranks in slab order.
            unsafe {
                cudarc::nccl::result::comm_init_rank(&mut comm, count as i32, unique, s as i32)
            }
            .map_err(nccl_err)?;
            comms.push(comm);
        }
        cudarc::nccl::result::group_end().map_err(nccl_err)?;
        let mut staging = Vec::with_capacity(write_back.len());
        for (_, t) in write_back {
            staging.push(match &t.mask {
                Some(mask) if held.contains(&t.to) => Some(slabs[t.to - held.start].staging(mask)?),
                _ => None,
            });
        }
        link.remote = Some(RemoteLink {
            comms: comms.into_iter().map(NcclComm).collect(),
            staging,
        });
        Ok(true)
    }

    fn exchange_remote(
        link: &mut CudaLink,
        slabs: &mut [Self],
        held: Range<usize>,
        transfers: &[(i32, Transfer)],
        after_even: bool,
    ) -> Result<(), SolverError> {
        use cudarc::nccl::{result, sys::ncclDataType_t::ncclUint8};
        let remote = link
            .remote
            .as_ref()
            .ok_or_else(|| SolverError::Device("no NCCL link with the other processes".into()))?;
        for s in slabs.iter() {
            let l = s.link();
            l.edges_done.record(&s.stream).map_err(dev)?;
            l.comm.wait(&l.edges_done).map_err(dev)?;
        }
        result::group_start().map_err(nccl_err)?;
        for (i, (_, t)) in transfers.iter().enumerate() {
            let staged = remote
                .staging
                .get(i)
                .and_then(|s| s.as_ref())
                .filter(|_| !after_even);
            for k in 0..5 {
                if held.contains(&t.from) {
                    let from = &slabs[t.from - held.start];
                    let (src, bytes) = from.plane(t.slots[k], t.from_layer);
                    // SAFETY: the plane lies inside the lattice; the operation
                    // runs on this slab's exchange stream.
                    unsafe {
                        result::send(
                            src as *const _,
                            bytes,
                            ncclUint8,
                            t.to as i32,
                            remote.comms[t.from - held.start].0,
                            from.link().comm.cu_stream() as _,
                        )
                    }
                    .map_err(nccl_err)?;
                }
                if held.contains(&t.to) {
                    let to = &slabs[t.to - held.start];
                    let (plane, bytes) = to.plane(t.slots[k], t.to_layer);
                    let dst = match staged {
                        Some(st) => st.planes.device_ptr(&to.stream).0 + (k * bytes) as u64,
                        None => plane,
                    };
                    // SAFETY: as above, into the lattice or its staging planes.
                    unsafe {
                        result::recv(
                            dst as *mut _,
                            bytes,
                            ncclUint8,
                            t.from as i32,
                            remote.comms[t.to - held.start].0,
                            to.link().comm.cu_stream() as _,
                        )
                    }
                    .map_err(nccl_err)?;
                }
            }
        }
        result::group_end().map_err(nccl_err)?;
        if !after_even {
            for (i, (_, t)) in transfers.iter().enumerate() {
                if let Some(st) = remote.staging.get(i).and_then(|s| s.as_ref()) {
                    slabs[t.to - held.start].unpack(st, t)?;
                }
            }
        }
        for s in slabs.iter_mut() {
            let l = s.link.as_mut().expect("a slab solver has a link");
            l.comm_done.record(&l.comm).map_err(dev)?;
            l.pending = true;
        }
        Ok(())
    }

    fn update(&mut self, part: Part, layers: &[Range<usize>]) -> Result<(), SolverError> {
        if part == Part::Edges {
            let link = self.link.as_mut().expect("a slab solver has a link");
            if link.pending {
                self.stream.wait(&link.comm_done).map_err(dev)?;
                link.pending = false;
            }
        }
        for l in layers {
            self.launch_layers(l.clone())?;
        }
        Ok(())
    }

    fn exchange(
        link: &mut CudaLink,
        slabs: &mut [Self],
        transfers: &[Transfer],
        after_even: bool,
    ) -> Result<(), SolverError> {
        for s in slabs.iter() {
            let l = s.link();
            l.edges_done.record(&s.stream).map_err(dev)?;
            l.comm.wait(&l.edges_done).map_err(dev)?;
        }
        // Where each transfer lands: the lattice plane, or the staging planes of
        // a masked write-back.
        let target = |slabs: &[Self], t: &Transfer, i: usize, k: usize| -> sys::CUdeviceptr {
            match link
                .staging
                .get(i)
                .and_then(|s| s.as_ref())
                .filter(|_| !after_even)
            {
                Some(st) => {
                    let (_, bytes) = slabs[t.to].plane(0, 0);
                    st.planes.device_ptr(&slabs[t.to].stream).0 + (k * bytes) as u64
                }
                None => slabs[t.to].plane(t.slots[k], t.to_layer).0,
            }
        };
        match &link.transport {
            Transport::Nccl(comms) => {
                use cudarc::nccl::{result, sys::ncclDataType_t::ncclUint8};
                result::group_start().map_err(nccl_err)?;
                for (i, t) in transfers.iter().enumerate() {
                    for k in 0..5 {
                        let (src, bytes) = slabs[t.from].plane(t.slots[k], t.from_layer);
                        let dst = target(slabs, t, i, k);
                        // SAFETY: both planes lie inside live buffers; each rank's
                        // operations go to its own comm stream.
                        unsafe {
                            result::send(
                                src as *const _,
                                bytes,
                                ncclUint8,
                                t.to as i32,
                                comms[t.from].0,
                                slabs[t.from].link().comm.cu_stream() as _,
                            )
                            .map_err(nccl_err)?;
                            result::recv(
                                dst as *mut _,
                                bytes,
                                ncclUint8,
                                t.from as i32,
                                comms[t.to].0,
                                slabs[t.to].link().comm.cu_stream() as _,
                            )
                            .map_err(nccl_err)?;
                        }
                    }
                }
                result::group_end().map_err(nccl_err)?;
            }
            Transport::Peer => {
                for (i, t) in transfers.iter().enumerate() {
                    // The copy runs on the receiver's stream, after the sender's edges.
                    let to = slabs[t.to].link();
                    to.comm
                        .wait(&slabs[t.from].link().edges_done)
                        .map_err(dev)?;
                    for k in 0..5 {
                        let (src, bytes) = slabs[t.from].plane(t.slots[k], t.from_layer);
                        let dst = target(slabs, t, i, k);
                        slabs[t.to].ctx.bind_to_thread().map_err(dev)?;
                        // SAFETY: both planes lie inside live buffers of these contexts.
                        unsafe {
                            cudarc::driver::result::memcpy_peer_async(
                                slabs[t.to].ctx.cu_ctx(),
                                dst,
                                slabs[t.from].ctx.cu_ctx(),
                                src,
                                bytes,
                                slabs[t.to].link().comm.cu_stream(),
                            )
                        }
                        .map_err(dev)?;
                    }
                }
            }
        }
        if !after_even {
            for (t, st) in transfers.iter().zip(&link.staging) {
                if let Some(st) = st {
                    slabs[t.to].unpack(st, t)?;
                }
            }
        }
        for s in slabs.iter_mut() {
            let l = s.link.as_mut().expect("a slab solver has a link");
            l.comm_done.record(&l.comm).map_err(dev)?;
            l.pending = true;
        }
        Ok(())
    }

    /// Through the host (MPI without CUDA awareness): the planes of a 16-bit
    /// lattice travel as their bit patterns, one per f32.
    fn read_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        out: &mut [f32],
    ) -> Result<(), SolverError> {
        self.ctx.bind_to_thread().map_err(dev)?;
        let nxy = self.grid.size[0] * self.grid.size[1];
        let bytes = self.plane(0, layer).1;
        let mut host = std::mem::take(&mut self.host_planes);
        host.resize(slots.len() * bytes, 0);
        let queued = host
            .chunks_exact_mut(bytes)
            .zip(slots)
            .try_for_each(|(host, &slot)| {
                // SAFETY: the plane lies inside the lattice; `host` outlives the
                // copy, which the stream's synchronisation below ends (also
                // where a later copy failed to queue).
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        host,
                        self.plane(slot, layer).0,
                        self.stream.cu_stream(),
                    )
                }
            });
        let synced = self.stream.synchronize().map_err(dev);
        let planes = host.chunks_exact(bytes).zip(out.chunks_exact_mut(nxy));
        planes.for_each(|(host, out)| populations_of(host, self.precision, out));
        self.host_planes = host;
        synced?;
        queued.map_err(dev)
    }

    fn write_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        planes: &[f32],
        mask: Option<&[u32]>,
    ) -> Result<(), SolverError> {
        self.ctx.bind_to_thread().map_err(dev)?;
        let nxy = self.grid.size[0] * self.grid.size[1];
        // A masked write keeps the entries outside the mask: read, merge, write.
        let mut merged = std::mem::take(&mut self.merged_planes);
        let planes = match mask {
            None => planes,
            Some(mask) => {
                merged.resize(planes.len(), 0.0);
                self.read_planes(layer, slots, &mut merged)?;
                for &p in mask {
                    merged[p as usize] = planes[p as usize];
                }
                &merged[..]
            }
        };
        // On the solver's stream, which the next steps follow: a synchronous
        // copy goes by the legacy default stream, which does not order the
        // solver's non-blocking one, and from pageable memory it may return
        // before its data lands (two processes then read stale halos now and
        // then: the 16-bit cube and cylinder, twenty-fifth session).
        let bytes = self.plane(0, layer).1;
        let mut host = std::mem::take(&mut self.host_planes);
        host.resize(slots.len() * bytes, 0);
        for (host, planes) in host.chunks_exact_mut(bytes).zip(planes.chunks_exact(nxy)) {
            bytes_of(planes, self.precision, host);
        }
        let queued = host
            .chunks_exact(bytes)
            .zip(slots)
            .try_for_each(|(host, &slot)| {
                // SAFETY: the plane lies inside the lattice; `host` outlives the
                // copy, which the stream's synchronisation below ends (also
                // where a later copy failed to queue).
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        self.plane(slot, layer).0,
                        host,
                        self.stream.cu_stream(),
                    )
                }
            });
        let synced = self.stream.synchronize().map_err(dev);
        self.host_planes = host;
        self.merged_planes = merged;
        synced?;
        queued.map_err(dev)
    }

    fn advance(&mut self) {
        self.t += 1;
    }

    fn settle(slabs: &mut [Self]) -> Result<(), SolverError> {
        for s in slabs.iter_mut() {
            let l = s.link.as_mut().expect("a slab solver has a link");
            if l.pending {
                s.stream.wait(&l.comm_done).map_err(dev)?;
                l.pending = false;
            }
        }
        for s in slabs.iter() {
            s.stream.synchronize().map_err(dev)?;
            s.link().comm.synchronize().map_err(dev)?;
        }
        Ok(())
    }

    fn change_sums(&mut self) -> Result<Option<ChangeSums>, SolverError> {
        let n = self.grid.cells() as u64;
        if self.snapshot_dev.is_none() {
            let buf = self
                .stream
                .alloc_zeros::<f32>(3 * n as usize)
                .map_err(dev)?;
            self.snapshot_dev = Some((u64::MAX, buf));
        }
        let stream = self.stream.clone();
        let cfg = self.reduction_config();
        let t = self.t;
        let (c0, c1) = self.owned_cells();
        self.compute_fields()?;
        let fields = self.fields_dev.as_ref().expect("computed");
        let (since, snapshot) = self.snapshot_dev.as_mut().expect("allocated");
        let has_prev = (*since < t) as u32;
        let mut partials = stream
            .alloc_zeros::<f64>(2 * REDUCTION_BLOCKS as usize)
            .map_err(dev)?;
        let mut b = stream.launch_builder(&self.kernels.velocity_change);
        b.arg(fields)
            .arg(snapshot)
            .arg(&n)
            .arg(&c0)
            .arg(&c1)
            .arg(&has_prev)
            .arg(&mut partials);
        // SAFETY: signature of `velocity_change`; fields 4n, snapshot 3n, 2 doubles per block.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        let sums = stream.clone_dtoh(&partials).map_err(dev)?;
        let steps = t.wrapping_sub(*since);
        *since = t;
        if has_prev == 0 {
            return Ok(None);
        }
        let (diff, norm) = sums
            .chunks_exact(2)
            .fold((0.0, 0.0), |(d, m), p| (d + p[0], m + p[1]));
        Ok(Some(ChangeSums { diff, norm, steps }))
    }

    fn set_time(&mut self, t: u64) {
        self.t = t;
    }

    fn add_sample(&mut self) -> Result<(), SolverError> {
        self.add_sample_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::Precision;

    #[test]
    fn host_planes_keep_each_population_bit_for_bit_in_both_storages() {
        // A 16-bit lattice's planes travel as their bit patterns, one per f32.
        let fp32 = [1.5f32, -0.0, f32::MIN_POSITIVE, 3.0e-41];
        let fp16 = [0x3c00u32, 0x8001, 0xffff, 0].map(f32::from_bits);
        for (precision, values) in [(Precision::Fp32, fp32), (Precision::Fp16, fp16)] {
            let mut bytes = vec![0u8; 4 * precision.bytes_per_population()];
            bytes_of(&values, precision, &mut bytes);
            let mut back = [7.0f32; 4];
            populations_of(&bytes, precision, &mut back);
            assert_eq!(
                back.map(f32::to_bits),
                values.map(f32::to_bits),
                "{precision:?}"
            );
        }
    }
}
